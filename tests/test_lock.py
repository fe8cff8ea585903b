import re
import textwrap

import pytest

from efa_image.artifacts import lock
from efa_image.errors import EfaImageError

GOOD_SHA = "a" * 64


def write(tmp_path, text, name="versions.yml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_project_lock_parses_and_names_roles(root):
    loaded = lock.load(root / "playbooks/group_vars/all/versions.yml")
    assert loaded.artifacts
    for artifact in loaded.artifacts.values():
        assert artifact.urls and artifact.role and artifact.version


def test_overlay_replaces_fields_and_refuses_unknown_components(tmp_path):
    base = write(
        tmp_path,
        f"""\
        efa_image_artifacts:
          libfabric:
            version: "2.1.0"
            role: efa
            filename: libfabric-{{version}}.tar.bz2
            urls: [https://example.invalid/a]
            sha256: "{GOOD_SHA}"
        """,
    )
    overlay = write(
        tmp_path,
        f"""\
        efa_image_artifacts_overlay:
          libfabric:
            filename: libfabric_{{version}}.orig.tar.xz
            urls: ["http://deb.example.invalid/libfabric_{{version}}.orig.tar.xz"]
            sha256: "{"b" * 64}"
        """,
        "overlay.yml",
    )
    merged = lock.load(base, [overlay]).get("libfabric")
    assert merged.filename == "libfabric_2.1.0.orig.tar.xz"
    assert merged.sha256 == "b" * 64 and merged.role == "efa"
    bad = write(tmp_path, "efa_image_artifacts_overlay:\n  libfabrik: {version: '1'}\n", "bad.yml")
    with pytest.raises(
        lock.LockError, match=r"bad.yml: efa_image_artifacts_overlay.libfabrik: unknown component"
    ):
        lock.load(base, [bad])


def test_an_overlays_pin_replaces_the_entrys_whichever_kind(tmp_path):
    base = write(
        tmp_path,
        f"""\
        efa_image_artifacts:
          aws_ofi_nccl:
            version: "1.21.1"
            role: aws_ofi_nccl
            filename: aws-ofi-nccl-{{version}}.tar.gz
            urls: [https://example.invalid/a]
            sha512: "{"c" * 128}"
        """,
    )
    assert lock.load(base).get("aws_ofi_nccl").digest == "c" * 128
    overlay = write(
        tmp_path,
        f'efa_image_artifacts_overlay:\n  aws_ofi_nccl: {{sha256: "{GOOD_SHA}"}}\n',
        "overlay.yml",
    )
    merged = lock.load(base, [overlay]).get("aws_ofi_nccl")
    assert (merged.digest_kind, merged.digest, merged.sha512) == ("sha256", GOOD_SHA, None)


def test_unknown_component_lookup_names_the_known_ones(tmp_path, root):
    loaded = lock.load(root / "playbooks/group_vars/all/versions.yml")
    with pytest.raises(lock.LockError, match=r"unknown component 'nope' \(known: .*libfabric"):
        loaded.get("nope")


def test_broken_files_name_the_file(tmp_path):
    with pytest.raises(lock.LockError, match="no such lock file"):
        lock.load(tmp_path / "missing.yml")
    with pytest.raises(lock.LockError, match="not valid YAML"):
        lock.load(write(tmp_path, "efa_image_artifacts: [unclosed\n"))
    with pytest.raises(lock.LockError, match="must be a non-empty mapping"):
        lock.load(write(tmp_path, "efa_image_artifacts: {}\n"))


def test_every_locked_role_and_method_is_known(root):
    from efa_image.building import flavors

    catalog = flavors.load_catalog(root / "playbooks/group_vars/all/flavors.yml")
    loaded = lock.load(root / "playbooks/group_vars/all/versions.yml")
    roles = {role for names in catalog.flavors.values() for role in names}
    methods = {(role, m) for profile in catalog.profiles.values() for role, m in profile.items()}
    # Opt-in entries, chosen per build by a role variable: openmpi4 (openmpi_artifact),
    # smdistributed_modelparallel (smdistributed_modelparallel; no v1 build fits the
    # lock's PyTorch).
    opt_in = {"openmpi4", "smdistributed_modelparallel"}
    from efa_image.building import base_recipes

    base_recipe_entries = {
        name
        for recipe in base_recipes.RECIPES.values()
        if recipe.unpack
        for name in recipe.unpack.artifacts
    }
    for artifact in loaded.artifacts.values():
        if artifact.role == "base":
            # Unpacked by a base image recipe, not installed by a role.
            assert artifact.wheelset in base_recipe_entries or artifact.name in base_recipe_entries
            continue
        assert artifact.role in roles, artifact.name
        for method in artifact.methods:
            # A method no profile chooses is still one the role has (rmm's source build).
            chosen = (artifact.role, method) in methods
            exists = (root / "roles" / artifact.role / "tasks" / f"install-{method}.yml").exists()
            assert chosen or exists or artifact.name in opt_in, (artifact.name, method)


def test_flavour_selection_follows_the_profile(root):
    from efa_image.building import flavors

    catalog = flavors.load_catalog(root / "playbooks/group_vars/all/flavors.yml")
    loaded = lock.load(root / "playbooks/group_vars/all/versions.yml")
    aws = {a.name for a in catalog.needed(loaded, "efa", "aws")}
    portable = {a.name for a in catalog.needed(loaded, "efa", "portable")}
    # aws: the installer brings libfabric, Open MPI and the plugin; NCCL and GDRCopy are built.
    assert aws == {"efa_installer", "nccl", "gdrcopy", "nccl_tests"}
    assert portable == {
        "libfabric",
        "openmpi",
        "nccl_wheel",
        "gdrcopy",
        "aws_ofi_nccl",
        "nccl_tests",
    }
    # The reduced flavour is what reachable sources build (the CI mirror).
    reduced = {a.name for a in catalog.needed(loaded, "efa-reduced", "portable")}
    assert reduced == {"libfabric", "openmpi", "nccl_wheel"}
    assert {"nccl_wheel", "aws_ofi_nccl"} <= {
        a.name for a in catalog.needed(loaded, "sagemaker", "upstream")
    }
    assert "metis" in {a.name for a in catalog.needed(loaded, "sagemaker", "portable")}
    with pytest.raises(EfaImageError, match="unknown flavour 'x'"):
        catalog.needed(loaded, "x", "aws")


def test_a_flavour_chooses_its_lock_entries_and_the_others_leave_them_out(root):
    """flavors.yml `artifacts:` names the entry a role variable picks; the entry it
    replaces (the role's default) and the alternatives other flavours pick are not
    fetched."""
    from efa_image.building import flavors

    catalog = flavors.load_catalog(root / "playbooks/group_vars/all/flavors.yml")
    loaded = lock.load(root / "playbooks/group_vars/all/versions.yml")
    assert catalog.defaults == {"pytorch_wheelset": "pytorch", "nccl_wheel_artifact": "nccl_wheel"}

    def sets(flavor: str) -> set[str]:
        return {a.wheelset or a.name for a in catalog.needed(loaded, flavor, "portable")}

    torchrun = sets("sagemaker-torchrun-reduced")
    assert {"pytorch_cu13", "nccl_wheel_cu13", "sagemaker_training"} <= torchrun
    assert not {"pytorch", "nccl_wheel", "metis", "rmm_wheel"} & torchrun
    assert {"aws_ofi_nccl", "nccl_tests"} <= sets("sagemaker-torchrun")
    for flavor in ("sagemaker", "sagemaker-reduced"):
        assert {"pytorch", "nccl_wheel"} <= sets(flavor)
        assert not {"pytorch_cu13", "nccl_wheel_cu13"} & sets(flavor)
    assert sets("efa-reduced") == {"libfabric", "openmpi", "nccl_wheel"}


def test_portable_profile_builds_from_debian_sources(root):
    from efa_image.building import flavors

    catalog = flavors.load_catalog(root / "playbooks/group_vars/all/flavors.yml")
    (overlay,) = catalog.overlay("portable")
    assert overlay == root / "playbooks/lock-overlays/debian-sources.yml"
    assert catalog.overlay("aws") == () and catalog.overlay("upstream") == ()
    loaded = lock.load(root / "playbooks/group_vars/all/versions.yml", [overlay])
    # Everything of the reduced flavour comes from Debian's pool and PyPI.
    for artifact in catalog.needed(loaded, "efa-reduced", "portable"):
        assert all(
            url.startswith(
                ("http://deb.debian.org/debian/pool/", "https://files.pythonhosted.org/")
            )
            for url in artifact.urls
        )


def test_role_lock_applies_the_profiles_overlay_then_the_environments(tmp_path, monkeypatch):
    """What a molecule verifier expects: the lock as the playbooks resolve it for a profile."""
    from efa_image.artifacts import context

    monkeypatch.delenv("EFA_IMAGE_LOCK_OVERLAY", raising=False)
    assert context.role_lock("portable").get("libfabric").version == "2.1.0"
    assert context.role_lock("aws").get("libfabric").version != "2.1.0"
    later = tmp_path / "later.yml"
    later.write_text("efa_image_artifacts_overlay:\n  libfabric:\n    version: '9.9.9'\n")
    monkeypatch.setenv("EFA_IMAGE_LOCK_OVERLAY", str(later))
    assert context.role_lock("portable").get("libfabric").version == "9.9.9"


def test_portable_cuda13_profile_takes_debian_sources_then_nccls_cu13_wheel(root):
    from efa_image.artifacts import context
    from efa_image.building import flavors
    from efa_image.compat import rules

    catalog = flavors.load_catalog(root / "playbooks/group_vars/all/flavors.yml")
    overlays = catalog.overlay("portable-cuda13")
    assert overlays == (
        root / "playbooks/lock-overlays/debian-sources.yml",
        root / "playbooks/lock-overlays/cuda13.yml",
    )
    assert catalog.methods("portable-cuda13") == catalog.methods("portable")
    # The profile's overlays come first and are not applied twice.
    user = root / "user.yml"
    assert context.with_profile_overlay(catalog, "portable-cuda13", [overlays[1], user]) == [
        overlays[0],
        overlays[1],
        user,
    ]
    loaded = lock.load(root / "playbooks/group_vars/all/versions.yml", list(overlays))
    wheel = loaded.get("nccl_wheel")
    assert wheel.filename.startswith("nvidia_nccl_cu13-") and wheel.pinned
    assert rules.nccl_cuda_major(wheel.filename) == "13"
    assert loaded.get("libfabric").urls[0].startswith("http://deb.debian.org/debian/pool/")


def test_the_readmes_pin_table_is_the_locks(root):
    """README.md's table of the main pins names each entry's (or wheel set's) version."""
    loaded = lock.load(root / "playbooks/group_vars/all/versions.yml")
    rows = re.findall(
        r"^\| [^|]+ \| (`[^|]+`) \| ([^|]+) \|", (root / "README.md").read_text(), re.M
    )
    assert len(rows) >= 10
    for entries, versions in rows:
        names = re.findall(r"`(\w+)`", entries)
        wanted = [v.strip() for v in versions.split(",")]
        if len(wanted) == 1:
            wanted *= len(names)
        for name, version in zip(names, wanted, strict=True):
            files = [a for a in loaded.artifacts.values() if name in (a.name, a.wheelset)]
            assert files, name
            # A wheel set's version is its main project's (torch, nvcc).
            main = ("/torch", "/nvidia-cuda-nvcc")
            pinned = {a.version for a in files if not a.wheelset or a.name.endswith(main)}
            assert version in pinned, (name, version, pinned)
