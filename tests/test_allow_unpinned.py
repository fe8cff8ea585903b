"""`efa-image build --allow-unpinned`: one flag for the controller and the roles.

The store (the controller's pre-flight and fetch) and Packer's `allow_unpinned`
variable, which reaches the roles as artifact_allow_unpinned, take the same
value; without the flag an artifact without a sha256 stops the build in its
pre-flight. Docker, the base image and Packer are stubbed: the tests stop where
Packer would start.
"""

import json
import re

import pytest

from efa_image import cli
from efa_image.artifacts import artifact_store, preflight
from efa_image.building import packer
from efa_image.types import BuildRequest

ARGS = ["build", "--flavor", "efa-reduced", "--profile", "portable", "--repository", "t"]


class Stop(Exception):
    """Raised where `packer build` would run."""


@pytest.fixture
def stubbed(monkeypatch, tmp_path, base_probed):
    """Everything before `packer build`, without docker; returns what reached Packer."""
    monkeypatch.setenv("EFA_IMAGE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("EFA_IMAGE_MIRROR", raising=False)
    monkeypatch.delenv("EFA_IMAGE_LOCK_OVERLAY", raising=False)
    monkeypatch.setattr(cli.build, "ensure_docker", lambda: None)
    seen: dict[str, object] = {"base": base_probed}
    monkeypatch.setattr(artifact_store.Store, "get", lambda self, artifact: tmp_path / "f")

    def packer_build(root, var_file, manifest):
        seen["vars"] = json.loads(var_file.read_text())
        raise Stop

    monkeypatch.setattr(packer, "packer_build", packer_build)
    return seen


def unpinned_overlay(tmp_path):
    path = tmp_path / "unpinned.yml"
    path.write_text('---\nefa_image_artifacts_overlay:\n  nccl_wheel:\n    sha256: ""\n')
    return str(path)


@pytest.mark.parametrize(("flag", "expected"), [([], False), (["--allow-unpinned"], True)])
def test_the_flag_reaches_packers_variables(stubbed, monkeypatch, flag, expected):
    monkeypatch.setattr(preflight, "check_sources", lambda *args, **kwargs: [])
    with pytest.raises(Stop):
        cli.main([*ARGS, *flag])
    assert stubbed["vars"]["allow_unpinned"] is expected


def test_packer_declares_every_variable_a_build_passes(root):
    declared = set(
        re.findall(r'^variable "(\w+)"', (root / "packer/variables.pkr.hcl").read_text(), re.M)
    )
    request = BuildRequest("efa", "aws", "b", "r", None, ())
    assert set(packer.packer_vars(request, {})) <= declared
    assert (
        "artifact_allow_unpinned = var.allow_unpinned"
        in (root / "packer/build.pkr.hcl").read_text()
    )


def test_without_the_flag_an_unpinned_artifact_stops_the_pre_flight(stubbed, tmp_path, capsys):
    mirror = tmp_path / "mirror"  # empty: every other artifact is missing too, at once
    mirror.mkdir()
    argv = [*ARGS, "--lock-overlay", unpinned_overlay(tmp_path), "--mirror", str(mirror)]
    assert cli.main(argv) == 1
    error = capsys.readouterr().err
    assert "nccl_wheel 2.30.7 has no sha256 in the lock" in error
    assert "run `efa-image lock update nccl_wheel` to pin it, or pass --allow-unpinned" in error
    # Refused by the pre-flight, the plan's first reader: before a fetch or Packer.
    assert len(stubbed["base"]) == 1 and "vars" not in stubbed
