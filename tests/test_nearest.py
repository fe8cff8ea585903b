"""The pre-flight names the nearest flavour and profile that the same sources can build."""

import hashlib
import textwrap

import pytest

from efa_image.artifacts import artifact_store, context, preflight
from efa_image.artifacts.lock import Artifact, Lock
from efa_image.building import build, nearest
from efa_image.building.flavors import Catalog
from efa_image.errors import EfaImageError
from efa_image.types import BuildRequest
from httpfixture import serve

CONTENT = b"archive stand-in\n"
SHA = hashlib.sha256(CONTENT).hexdigest()
# name: (role, methods, version)
ENTRIES = {
    "efa_installer": ("efa", ("efa_installer",), "1.47.0"),
    "libfabric": ("efa", ("source",), "2.1.0"),
    "openmpi": ("openmpi", ("source",), "5.0.7"),
    "nccl": ("nccl", ("source",), "2.30.4-1"),
    "nccl_wheel": ("nccl", ("wheel",), "2.30.4"),
    "aws_ofi_nccl": ("aws_ofi_nccl", ("source",), "1.19.0"),
    "nccl_tests": ("nccl_tests", (), "2.17.6"),
}
AWS = {
    "efa": "efa_installer",
    "openmpi": "efa_installer",
    "nccl": "source",
    "aws_ofi_nccl": "efa_installer",
    "nccl_tests": "source",
}
SOURCE = {"efa": "source", "openmpi": "source", "nccl": "wheel", "aws_ofi_nccl": "source"}


def catalog(common=True):
    """The project's shape: efa, its reduced flavour, and a planned one (no playbook)."""
    head = ["common"] if common else []
    return Catalog(
        flavors={
            "efa": [*head, "efa", "openmpi", "nccl", "aws_ofi_nccl", "nccl_tests"],
            "efa-reduced": [*head, "efa", "openmpi", "nccl"],
            "tiny": ["efa"],
        },
        profiles={"aws": AWS, "upstream": {**SOURCE, "nccl_tests": "source"}, "portable": SOURCE},
        default_flavor="efa",
        default_profile="aws",
        descriptions={"efa-reduced": "efa without the plugin; NCCL does not use EFA without it"},
        planned=frozenset({"tiny"}),
    )


@pytest.fixture
def server():
    with serve() as state:
        yield state


def make_lock(server, unreachable, versions=None):
    found = {}
    for name, (role, methods, version) in ENTRIES.items():
        url = f"{server.url}/missing/{name}" if name in unreachable else server.add(name, CONTENT)
        found[name] = Artifact(
            name=name,
            version=(versions or {}).get(name, version),
            role=role,
            filename=f"{name}.tar.gz",
            urls=(url,),
            sha256=SHA,
            methods=methods,
        )
    return Lock(found, server.url)


def fail(server, tmp_path, unreachable, versions=None, flavors=None, mirror=None):
    """The pre-flight's error for efa/aws with these artifacts unreachable."""
    loaded = make_lock(server, unreachable, versions)
    store = artifact_store.Store(cache_dir=tmp_path / "cache", timeout=2, mirror=mirror)
    ctx = context.Context(loaded, store, flavors or catalog(), [])
    ctx.by_profile.update(aws=loaded, portable=loaded)
    # upstream's lock names newer releases, from hosts these tests never reach.
    newer = {"libfabric": "2.5.1", "openmpi": "5.0.10"}
    ctx.by_profile["upstream"] = make_lock(server, {*unreachable, *newer}, newer)
    with pytest.raises(EfaImageError) as info:
        preflight.run(ctx, ctx.select(None, "efa", "aws"))
    return str(info.value)


def test_candidates_are_ordered_by_closeness_and_only_buildable():
    # Other profiles of the flavour, then the reduced flavour, then both changed;
    # the planned flavour (no playbook) is never offered.
    assert nearest.combinations(catalog(), "efa", "aws") == [
        ("efa", "upstream"),
        ("efa", "portable"),
        ("efa-reduced", "aws"),
        ("efa-reduced", "upstream"),
        ("efa-reduced", "portable"),
    ]
    # upstream's methods equal portable's for the reduced roles: it is the nearer one.
    assert nearest.combinations(catalog(), "efa-reduced", "portable") == [
        ("efa-reduced", "upstream"),
        ("efa-reduced", "aws"),
    ]


@pytest.mark.parametrize("common", [True, False])
def test_unreachable_installer_plugin_and_tests_point_at_reduced_portable(server, tmp_path, common):
    message = fail(
        server,
        tmp_path,
        {"efa_installer", "aws_ofi_nccl", "nccl_tests"},
        flavors=catalog(common),
    )
    assert message.startswith("2 of 3 artifacts cannot be had:")
    assert "Remedy: build from a mirror" in message
    assert "  make image FLAVOR=efa-reduced PROFILE=portable\n" in message
    assert "  (efa-image build --flavor efa-reduced --profile portable)\n" in message
    assert "It leaves out the roles aws_ofi_nccl and nccl_tests." in message
    assert "efa-reduced: efa without the plugin; NCCL does not use EFA without it" in message
    # The profile's methods, from the catalog: source instead of the EFA installer.
    assert (
        "Profile portable instead of aws builds efa and openmpi by source instead of "
        "efa_installer; nccl by wheel instead of source." in message
    )
    assert (
        "Its artifacts, all at hand: libfabric 2.1.0, openmpi 5.0.7, nccl_wheel 2.30.4." in message
    )
    assert "efa/portable lacks aws_ofi_nccl, nccl_tests" in message
    assert "efa-reduced/aws lacks efa_installer" in message
    assert "tiny" not in message
    # One pre-flight of every candidate's artifacts; none is asked twice.
    assert server.hits["HEAD /missing/efa_installer"] == 1
    assert server.hits["HEAD /files/libfabric"] == 1


def test_a_profile_change_alone_keeps_every_role(server, tmp_path):
    message = fail(server, tmp_path, {"efa_installer"})
    assert "  make image FLAVOR=efa PROFILE=portable\n" in message
    assert "efa/upstream lacks libfabric, openmpi." in message
    assert "leaves out" not in message
    assert "aws_ofi_nccl by source instead of efa_installer" in message


def test_nothing_buildable_says_so(server, tmp_path):
    message = fail(server, tmp_path, {"efa_installer", "libfabric"})
    assert "No other flavour and profile can be built from the reachable sources either:" in (
        message
    )
    assert "  efa-reduced/portable lacks libfabric" in message
    assert "make image FLAVOR" not in message


def test_incompatible_versions_are_not_suggested(server, tmp_path):
    message = fail(
        server,
        tmp_path,
        {"efa_installer", "aws_ofi_nccl", "nccl_tests"},
        versions={"libfabric": "1.18.0"},
    )
    assert "efa-reduced/portable breaks nccl-2.19-needs-libfabric-1.19.1" in message
    assert "make image FLAVOR" not in message


def test_a_mirror_is_searched_and_named_in_the_command(server, tmp_path):
    loaded = make_lock(server, set())
    mirror = tmp_path / "mirror"
    for name in ("libfabric", "openmpi", "nccl_wheel"):
        path = mirror / loaded.get(name).mirror_path()
        path.parent.mkdir(parents=True)
        path.write_bytes(CONTENT)
    message = fail(server, tmp_path, set(), mirror=str(mirror))
    assert f"Put the files into the mirror {mirror}" in message
    assert f"that the mirror {mirror} holds everything for:" in message
    assert f"  make image FLAVOR=efa-reduced PROFILE=portable MIRROR={mirror}\n" in message
    assert f"--profile portable --mirror {mirror})" in message


def test_a_mirror_that_holds_everything_needs_no_suggestion(server, tmp_path, capsys):
    loaded = make_lock(server, set(ENTRIES))
    mirror = tmp_path / "mirror"
    for artifact in loaded.artifacts.values():
        path = mirror / artifact.mirror_path()
        path.parent.mkdir(parents=True)
        path.write_bytes(CONTENT)
    store = artifact_store.Store(cache_dir=tmp_path / "cache", mirror=str(mirror), timeout=2)
    ctx = context.Context(loaded, store, catalog(), [])
    checks = preflight.run(ctx, ctx.select(None, "efa", "aws"))
    assert [check.artifact.name for check in checks] == ["efa_installer", "nccl", "nccl_tests"]
    assert "combinations" not in capsys.readouterr().out


def test_artifacts_chosen_by_name_get_no_suggestion(server, tmp_path):
    loaded = make_lock(server, {"efa_installer"})
    store = artifact_store.Store(cache_dir=tmp_path / "cache", timeout=2)
    ctx = context.Context(loaded, store, catalog(), [])
    with pytest.raises(EfaImageError) as info:
        preflight.run(ctx, ctx.select(["efa_installer"], None, None))
    assert "Remedy: build from a mirror" in str(info.value)
    assert "flavour" not in str(info.value)


def test_each_profile_is_judged_with_its_own_lock_overlay(server, tmp_path):
    """portable's overlay points libfabric at a reachable copy; upstream's lock does not."""
    lock_file = tmp_path / "versions.yml"
    lock_file.write_text(
        textwrap.dedent(f"""\
        efa_image_artifacts:
          libfabric:
            version: "2.5.1"
            role: efa
            methods: [source]
            filename: libfabric-{{version}}.tar.bz2
            urls: ["{server.url}/missing/libfabric"]
            sha256: "{SHA}"
        """)
    )
    overlay = tmp_path / "debian-sources.yml"
    overlay.write_text(
        textwrap.dedent(f"""\
        efa_image_artifacts_overlay:
          libfabric:
            version: "2.1.0"
            urls: ["{server.add("libfabric_2.1.0.orig.tar.xz", CONTENT)}"]
        """)
    )
    only_efa = Catalog(
        flavors={"efa": ["efa"]},
        profiles={"upstream": {"efa": "source"}, "portable": {"efa": "source"}},
        default_flavor="efa",
        default_profile="upstream",
        overlays={"portable": (overlay,)},
    )
    store = artifact_store.Store(cache_dir=tmp_path / "cache", timeout=2)
    ctx = context.load(lock_file, [], "", store, only_efa)
    assert ctx.overlays == [] and ctx.lock_for("portable").get("libfabric").version == "2.1.0"
    assert context.with_profile_overlay(only_efa, "portable", [overlay]) == [overlay]
    with pytest.raises(EfaImageError) as info:
        preflight.run(ctx, ctx.select(None, None, None))
    message = str(info.value)
    assert "  make image FLAVOR=efa PROFILE=portable\n" in message
    assert "Profile portable instead of upstream uses the same methods." in message
    assert "Its artifacts, all at hand: libfabric 2.1.0." in message


def test_build_stops_at_the_preflight_with_the_same_advice(
    server, tmp_path, monkeypatch, base_probed
):
    monkeypatch.setattr(build, "project_root", lambda: tmp_path)
    loaded = make_lock(server, {"efa_installer", "aws_ofi_nccl", "nccl_tests"})
    store = artifact_store.Store(cache_dir=tmp_path / "cache", timeout=2)
    ctx = context.Context(loaded, store, catalog(), [])
    ctx.by_profile.update(dict.fromkeys(ctx.catalog.profiles, loaded))
    request = BuildRequest("efa", "aws", "base", "efa-image", None, ())
    with pytest.raises(EfaImageError, match="make image FLAVOR=efa-reduced PROFILE=upstream"):
        build.build(request, ctx)
    assert not (tmp_path / "cache" / "sha256").exists()
