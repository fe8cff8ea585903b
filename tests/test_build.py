import json
from dataclasses import replace
from pathlib import Path

import pytest

from efa_image.building import build, images, packer, plan
from efa_image.building.flavors import load_catalog
from efa_image.building.tags import component_tags
from efa_image.compat import planned
from efa_image.errors import EfaImageError
from efa_image.types import BuildRequest

REQUEST = BuildRequest(
    flavor="efa",
    profile="portable",
    base_image="efa-image/base:debian13",
    repository="efa-image",
    mirror=None,
    overlays=("/x/debian-sources.yml",),
    extra_vars=("efa_build_jobs=4",),
)


def test_tags_name_flavour_profile_and_versions():
    tags = component_tags("efa", "portable", {"libfabric": "2.1.0", "openmpi": "5.0.7"})
    assert tags == ["efa-portable", "efa-portable-libfabric2.1.0-openmpi5.0.7"]
    odd = component_tags("efa", "portable", {"nccl": "2.30.4-1+cuda12"})
    assert odd[1] == "efa-portable-nccl2.30.4-1-cuda12"


def test_a_wheel_sets_files_count_once_as_the_set():
    member = artifact("pytorch/torch", "2.5.1")
    versions = plan.component_versions(
        [
            replace(member, wheelset="pytorch", wheelset_version="2.5.1"),
            replace(
                artifact("pytorch/sympy", "1.13.1"), wheelset="pytorch", wheelset_version="2.5.1"
            ),
            artifact("metis", "5.1.0"),
        ]
    )
    assert versions == {"pytorch": "2.5.1", "metis": "5.1.0"}


def test_packer_vars_carry_labels_overlays_and_extra_vars():
    values = packer.packer_vars(REQUEST, {"libfabric": "2.1.0"})
    assert values["labels"] == {"org.efa-image.component.libfabric": "2.1.0"}
    assert values["lock_overlay"] == "/x/debian-sources.yml"
    assert values["mirror"] == "" and values["ansible_extra_vars"] == ["efa_build_jobs=4"]
    assert values["build_cache"] == ""
    assert packer.packer_vars(replace(REQUEST, build_cache="off"), {})["build_cache"] == "off"
    assert json.loads(json.dumps(values)) == values


def test_packer_vars_name_the_artifact_cache_the_docker_source_mounts(monkeypatch, tmp_path):
    monkeypatch.setenv("EFA_IMAGE_CACHE", str(tmp_path))
    assert packer.packer_vars(REQUEST, {})["artifact_cache"] == str(tmp_path)


def test_built_image_comes_from_the_last_run_only(tmp_path):
    manifest = tmp_path / "packer-manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "builds": [
                    {"builder_type": "docker", "artifact_id": "sha256:old", "packer_run_uuid": "a"},
                    {"builder_type": "docker", "artifact_id": "sha256:new", "packer_run_uuid": "b"},
                ],
                "last_run_uuid": "b",
            }
        )
    )
    assert packer.built_image_id(manifest) == "sha256:new"
    manifest.write_text(json.dumps({"builds": [], "last_run_uuid": "c"}))
    with pytest.raises(EfaImageError, match="names no docker image of the last run"):
        packer.built_image_id(manifest)
    with pytest.raises(EfaImageError, match="packer wrote no manifest"):
        packer.built_image_id(tmp_path / "missing.json")


def test_ansible_failure_is_found_in_packer_output():
    """Output captured from a failed `packer build` (a role task failing)."""
    output = (Path(__file__).parent / "data/packer-ansible-failure.txt").read_text()
    failure = packer.ansible_failure(output)
    assert failure.splitlines()[0].startswith("TASK [openmpi : Assert the OFI MTL")
    assert failure.splitlines()[-1].startswith("fatal: [default]: FAILED!")
    assert "\x1b[" not in failure and "docker.image:" not in failure
    assert packer.ansible_failure("==> docker.image: Killing the container\n") is None


def test_image_env_must_match_what_the_roles_describe():
    described = [
        {"path": ["/opt/amazon/efa/bin"], "env": {"RDMAV_FORK_SAFE": "1"}},
        {"path": ["/opt/amazon/openmpi/bin"], "env": {}},
    ]
    good = ["PATH=/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:/usr/bin", "RDMAV_FORK_SAFE=1"]
    assert images.env_mismatches(good, described) == []
    bad = ["PATH=/opt/amazon/efa/bin:$PATH"]
    assert set(images.env_mismatches(bad, described)) == {
        "RDMAV_FORK_SAFE=(unset), the roles set 1",
        "PATH lacks /opt/amazon/openmpi/bin",
    }


def test_concatenated_json_files_split():
    assert images.split_json('{"a": 1}\n{"b": [2]}\n') == ['{"a": 1}', '{"b": [2]}']
    assert images.split_json("") == []


PROFILE_ROLES_OUTPUT = """\
    docker.image: PLAY RECAP *********************************************************
    docker.image: ROLES RECAP ********************************************************
    docker.image: Monday 30 November 2026  19:50:01 +0000 (0:00:01.000)       0:12:00.000 ***
    docker.image: ===============================================================================
    docker.image: openmpi ------------------------------------------------------- 540.25s
    docker.image: efa ----------------------------------------------------------- 75.10s
    docker.image: common -------------------------------------------------------- 60.00s
    docker.image: ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
    docker.image: total --------------------------------------------------------- 675.35s
"""


def test_role_durations_come_from_the_roles_recap():
    assert packer.role_durations(PROFILE_ROLES_OUTPUT) == {
        "openmpi": 540.25,
        "efa": 75.10,
        "common": 60.0,
    }
    assert packer.role_durations("no recap here") == {}


def test_build_cache_outcomes_come_from_the_roles_lines():
    output = (
        '    docker.image: \x1b[0;32m    "msg": '
        '"build cache: libfabric de3d7e36047f7e96 hit"\x1b[0m\n'
        '    docker.image:     "msg": "build cache: openmpi 0123456789abcdef miss"\n'
        '    docker.image:     "msg": "build cache: nccl_tests fedcba9876543210 off"\n'
    )
    assert packer.build_cache_outcomes(output) == {
        "libfabric": "hit",
        "openmpi": "miss",
        "nccl_tests": "off",
    }
    assert packer.build_cache_outcomes("no cache lines") == {}


def test_owners_of_dead_builds_are_stale(monkeypatch):
    assert images.owner_alive(f"pid:{__import__('os').getpid()}")
    assert not images.owner_alive("pid:999999999")
    # Containers labelled by hand (packer build without efa-image) are never removed.
    assert images.owner_alive("manual")


def test_only_build_containers_of_dead_builds_are_stale():
    """A container run from a built image inherits the build's owner label (images built
    before the label was emptied): it is the user's, never a leftover build container."""
    alive = f"pid:{__import__('os').getpid()}"
    listing = "\n".join(
        [
            "efa-image-build-0b1e2c3d-0000-4000-8000-000000000001 pid:999999999",
            f"efa-image-build-0b1e2c3d-0000-4000-8000-000000000002 {alive}",
            "efa-image-build-0b1e2c3d-0000-4000-8000-000000000003 ",
            "trusting_hopper pid:999999999",
            "algo-1 pid:999999999",
        ]
    )
    assert images.stale_build_containers(listing) == [
        "efa-image-build-0b1e2c3d-0000-4000-8000-000000000001"
    ]


def test_the_committed_image_does_not_keep_the_build_owner_label(root):
    """docker commit copies the build container's labels into the image (seen here):
    the template empties the owner label in the image's changes."""
    source = (root / "packer/sources.pkr.hcl").read_text()
    assert '"--name", local.container' in source
    assert f'container = "{images.BUILD_CONTAINER_PREFIX}' in source
    changes = source[source.index("changes = concat(") :]
    changes = changes[: changes.index("\n  )")]
    assert f'"LABEL {images.OWNER_LABEL}=\\"\\""' in changes


def artifact(name, version, filename="x.tar.gz"):
    from efa_image.artifacts.lock import Artifact

    return Artifact(
        name=name, version=version, role="r", filename=filename, urls=("u",), sha256="0" * 64
    )


def test_compatibility_facts_follow_methods_and_base_cuda():
    needed = [
        artifact("libfabric", "2.1.0"),
        artifact("nccl_wheel", "2.30.4", "nvidia_nccl_cu12-2.30.4-py3-none-any.whl"),
        artifact("aws_ofi_nccl", "1.19.0"),
    ]
    facts = planned.compat_facts(
        needed, ["efa", "nccl", "aws_ofi_nccl"], {"efa": "source"}, images.BaseCuda("/c", "12.4")
    )
    assert facts == {
        "efa_method": "source",
        "libfabric": "2.1.0",
        "nccl": "2.30.4",
        "nccl_cuda_major": "12",
        "aws_ofi_nccl": "1.19.0",
        "base_cuda_major": "12",
    }


def test_incompatible_versions_stop_the_build_with_reason_and_fix():
    facts = {"efa_method": "efa_installer", "efa_installer": "1.28.0", "nccl": "2.30.4"}
    with pytest.raises(EfaImageError, match="nothing was built") as info:
        planned.check_compatibility(facts)
    assert "efa_installer" in str(info.value) and "aws-ofi-nccl/issues/584" in str(info.value)
    wrong_cuda = {"efa_method": "source", "nccl_cuda_major": "13", "base_cuda_major": "12"}
    with pytest.raises(EfaImageError, match="nccl_cuda_major"):
        planned.check_compatibility(wrong_cuda)
    assert planned.check_compatibility({"efa_method": "source", "libfabric": "2.1.0"}).ok


def test_packer_vars_name_the_owner_and_cuda_home():
    values = packer.packer_vars(
        REQUEST, {}, owner="pid:1", cuda_home="/usr/lib/nvidia-cuda-toolkit"
    )
    assert values["build_owner"] == "pid:1"
    assert values["cuda_home"] == "/usr/lib/nvidia-cuda-toolkit"
    assert packer.packer_vars(REQUEST, {})["cuda_home"] == "/usr/local/cuda"


class Stop(Exception):
    """Raised where a real build would start fetching and compiling."""


@pytest.fixture
def unchanged(monkeypatch, tmp_path, base_probed):
    """build.build() up to the fetch, with docker stubbed: a verified image on record."""
    from efa_image.artifacts import context, preflight
    from efa_image.artifacts.artifact_store import Store
    from efa_image.building import fingerprint

    monkeypatch.setenv("EFA_IMAGE_CACHE", str(tmp_path))
    ctx = context.load(None, [], "portable", Store(tmp_path))
    monkeypatch.setattr(preflight, "check_sources", lambda *a: None)
    monkeypatch.setattr(images, "image_size", lambda ref: 703_000_000)
    tagged: list[str] = []
    monkeypatch.setattr(build, "run_command", lambda argv: tagged.append(argv[-1]))

    def fetch(*a):
        raise Stop

    monkeypatch.setattr(ctx.store, "get", fetch)
    overlays = tuple(str(p) for p in ctx.overlays)
    request = replace(REQUEST, flavor="efa-reduced", overlays=overlays, repository="t")
    digest = fingerprint.compute(
        build.project_root(),
        flavor="efa-reduced",
        profile="portable",
        flavor_roles=ctx.catalog.roles("efa-reduced"),
        base_image_id="sha256:" + "b" * 64,
        artifacts=ctx.select(None, "efa-reduced", "portable").artifacts,
        overlays=[Path(p) for p in overlays],
        extra_vars=request.extra_vars,
    )
    image = "sha256:" + "c" * 64
    fingerprint.record_verified(digest, image)
    labels = {fingerprint.LABEL: digest.digest}
    monkeypatch.setattr(images, "label", lambda ref, name: labels.get(name))
    return ctx, request, image, tagged, labels


def test_an_unchanged_build_tags_the_verified_image_and_runs_nothing(unchanged):
    ctx, request, image, tagged, _ = unchanged
    result = build.build(request, ctx)
    assert result.reused and result.image == image
    assert tagged == ["t:efa-reduced-portable", result.tags[1]] and result.fingerprint
    assert "packer build" not in result.stages and "fetch" not in result.stages


def test_rebuild_or_a_changed_input_builds(unchanged):
    ctx, request, _, _, labels = unchanged
    with pytest.raises(Stop):
        build.build(replace(request, rebuild=True), ctx)
    with pytest.raises(Stop):
        build.build(replace(request, extra_vars=("efa_build_jobs=8",)), ctx)
    # The recorded image was replaced by one without the label: built again.
    labels.clear()
    with pytest.raises(Stop):
        build.build(request, ctx)


def test_the_base_is_probed_once_and_the_pre_flight_asks_only_for_what_it_lacks(
    unchanged, monkeypatch
):
    """A DLC: its EFA and NCCL are kept, the sources are asked only for the rest."""
    from efa_image.artifacts import preflight
    from efa_image.building import basecontents

    ctx, request, _, _, _ = unchanged
    found = (
        "efa prefix /opt/amazon/efa\nefa version 2.1.0\nnccl prefix /usr/local\nnccl version 2.23.4"
    )
    probed: list[str] = []
    monkeypatch.setattr(
        basecontents, "probe", lambda ref: probed.append(ref) or basecontents.parse_probe(found)
    )
    asked: list[str] = []
    monkeypatch.setattr(
        preflight,
        "check_sources",
        lambda context, selection: asked.extend(a.role for a in selection.artifacts),
    )
    with pytest.raises(Stop):
        build.build(replace(request, base_image="dlc:1", rebuild=True), ctx)
    assert "openmpi" in asked and not {"efa", "nccl"} & set(asked)
    assert probed == ["dlc:1"]


def test_the_stages_run_in_order_each_named(unchanged, capsys):
    """The plan's steps, then the stages reading it (here up to the fetch)."""
    ctx, request, _, _, _ = unchanged
    with pytest.raises(Stop):
        build.build(replace(request, rebuild=True), ctx)
    out = capsys.readouterr().out.splitlines()
    started = [line.removeprefix("==> image: ") for line in out if line.startswith("==> image: ")]
    assert started == [
        "plan",
        "base image",
        "base probe",
        "compatibility",
        "fingerprint",
        "pre-flight",
        "fetch",
    ]


def test_sagemaker_flavours_put_the_training_contract_into_the_image_env():
    """The sagemaker_training role's env.d record, as packer's ENV gets it."""
    catalog = load_catalog()
    for flavor in ("sagemaker", "sagemaker-reduced"):
        assert "sagemaker_training" in catalog.roles(flavor)
        assert catalog.image_env[flavor] == {"SAGEMAKER_SUBMIT_DIRECTORY": "/opt/ml/code"}
        assert catalog.image_path[flavor] == ["/opt/ml/code"]
    assert "efa" not in catalog.image_env and "efa" not in catalog.image_path
    values = packer.packer_vars(
        REQUEST,
        {},
        env=catalog.image_env["sagemaker"],
        path_extra=catalog.image_path["sagemaker"],
    )
    assert values["image_env"] == {"SAGEMAKER_SUBMIT_DIRECTORY": "/opt/ml/code"}
    assert values["image_path"] == ["/opt/ml/code"]
    assert packer.packer_vars(REQUEST, {})["image_env"] == {}
