import json
from pathlib import Path

import pytest

from efa_image import build
from efa_image.errors import EfaImageError

REQUEST = build.BuildRequest(
    flavor="efa",
    profile="portable",
    base_image="efa-image/base:debian13",
    repository="efa-image",
    mirror=None,
    overlays=("/x/debian-sources.yml",),
    extra_vars=("efa_build_jobs=4",),
)


def test_tags_name_flavour_profile_and_versions():
    tags = build.tags_for(REQUEST, {"libfabric": "2.1.0", "openmpi": "5.0.7"})
    assert tags == ["efa-portable", "efa-portable-libfabric2.1.0-openmpi5.0.7"]
    odd = build.tags_for(REQUEST, {"nccl": "2.30.4-1+cuda12"})
    assert odd[1] == "efa-portable-nccl2.30.4-1-cuda12"


def test_packer_vars_carry_labels_overlays_and_extra_vars():
    values = build.packer_vars(REQUEST, {"libfabric": "2.1.0"})
    assert values["labels"] == {"org.efa-image.component.libfabric": "2.1.0"}
    assert values["lock_overlay"] == "/x/debian-sources.yml"
    assert values["mirror"] == "" and values["ansible_extra_vars"] == ["efa_build_jobs=4"]
    assert json.loads(json.dumps(values)) == values


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
    assert build.built_image_id(manifest) == "sha256:new"
    manifest.write_text(json.dumps({"builds": [], "last_run_uuid": "c"}))
    with pytest.raises(EfaImageError, match="names no docker image of the last run"):
        build.built_image_id(manifest)
    with pytest.raises(EfaImageError, match="packer wrote no manifest"):
        build.built_image_id(tmp_path / "missing.json")


def test_ansible_failure_is_found_in_packer_output():
    """Output captured from a failed `packer build` (a role task failing)."""
    output = (Path(__file__).parent / "data/packer-ansible-failure.txt").read_text()
    failure = build.ansible_failure(output)
    assert failure.splitlines()[0].startswith("TASK [openmpi : Assert the OFI MTL")
    assert failure.splitlines()[-1].startswith("fatal: [default]: FAILED!")
    assert "\x1b[" not in failure and "docker.image:" not in failure
    assert build.ansible_failure("==> docker.image: Killing the container\n") is None


def test_image_env_must_match_what_the_roles_describe():
    described = [
        {"path": ["/opt/amazon/efa/bin"], "env": {"RDMAV_FORK_SAFE": "1"}},
        {"path": ["/opt/amazon/openmpi/bin"], "env": {}},
    ]
    good = ["PATH=/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:/usr/bin", "RDMAV_FORK_SAFE=1"]
    assert build.env_mismatches(good, described) == []
    bad = ["PATH=/opt/amazon/efa/bin:$PATH"]
    assert set(build.env_mismatches(bad, described)) == {
        "RDMAV_FORK_SAFE=(unset), the roles set 1",
        "PATH lacks /opt/amazon/openmpi/bin",
    }


def test_concatenated_json_files_split():
    assert build.split_json('{"a": 1}\n{"b": [2]}\n') == ['{"a": 1}', '{"b": [2]}']
    assert build.split_json("") == []
