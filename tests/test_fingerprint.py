"""Image fingerprints: each input of a build changes the digest, nothing else does."""

from __future__ import annotations

import json
import shutil
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from efa_image.artifacts.lock import Artifact
from efa_image.building import build, fingerprint, images

LIBFABRIC = Artifact("libfabric", "2.1.0", "efa", "libfabric.tar.xz", ("https://x/",), "a" * 64)
OPENMPI = Artifact("openmpi", "5.0.7", "openmpi", "openmpi.tar.xz", ("https://y/",), "b" * 64)


@pytest.fixture(scope="module")
def project(tmp_path_factory, root_dir: Path) -> Path:
    """One copy of the project's roles, playbooks and shared inputs for the module."""
    tmp_path = tmp_path_factory.mktemp("project")
    for name in ("roles", "playbooks", "packer", "plugins", "src/efa_image"):
        shutil.copytree(
            root_dir / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(root_dir / "ansible.cfg", tmp_path / "ansible.cfg")
    (tmp_path / "overlay.yml").write_text("efa_image_artifacts: {}\n")
    return tmp_path


@pytest.fixture(scope="module")
def root_dir() -> Path:
    return Path(__file__).resolve().parents[1]


@contextmanager
def appended(path: Path):
    """The file with a comment line added, restored afterwards."""
    original = path.read_bytes()
    path.write_bytes(original + b"\n# changed\n")
    try:
        yield
    finally:
        path.write_bytes(original)


def compute(project: Path, **changes) -> fingerprint.Fingerprint:
    arguments = {
        "flavor": "efa-reduced",
        "profile": "portable",
        "flavor_roles": ["efa", "openmpi", "mpi_ssh", "nccl"],
        "base_image_id": "sha256:" + "1" * 64,
        "artifacts": [LIBFABRIC, OPENMPI],
        "overlays": [project / "overlay.yml"],
        "extra_vars": (),
    }
    return fingerprint.compute(project, **(arguments | changes))


def test_the_roles_that_run_include_what_the_flavour_roles_and_playbooks_include(root):
    roles = fingerprint.roles_that_run(root, ["efa", "openmpi", "mpi_ssh", "nccl"])
    # common and artifact come from include_role; manifest from the playbook.
    assert roles == ["artifact", "common", "efa", "manifest", "mpi_ssh", "nccl", "openmpi"]
    assert "nccl_tests" not in roles and "aws_ofi_nccl" not in roles


def test_identical_inputs_give_the_same_fingerprint(project):
    first, second = compute(project), compute(project)
    assert first == second and len(first.digest) == 64
    # Order of the artifacts does not matter; the record names every input.
    assert compute(project, artifacts=[OPENMPI, LIBFABRIC]).digest == first.digest
    assert set(first.inputs) >= {"flavor", "profile", "base_image", "artifacts", "roles"}


@pytest.mark.parametrize(
    "changes",
    [
        {"flavor": "efa"},
        {"profile": "upstream"},
        {"base_image_id": "sha256:" + "2" * 64},
        {"artifacts": [replace(LIBFABRIC, version="2.1.1"), OPENMPI]},
        {"artifacts": [replace(LIBFABRIC, sha256="c" * 64), OPENMPI]},
        {"artifacts": [LIBFABRIC]},
        {"extra_vars": ("efa_build_jobs=4",)},
        {"flavor_roles": ["efa", "openmpi", "mpi_ssh", "nccl", "nccl_tests"]},
    ],
    ids=lambda c: next(iter(c)),
)
def test_each_changed_input_changes_the_fingerprint(project, changes):
    assert compute(project, **changes).digest != compute(project).digest


@pytest.mark.parametrize(
    "path",
    [
        "roles/openmpi/vars/main.yml",
        "roles/common/tasks/build_steps.yml",
        "roles/artifact/defaults/main.yml",
        "playbooks/group_vars/all/flavors.yml",
        "packer/sources.pkr.hcl",
        "src/efa_image/building/build_cache.py",
        "ansible.cfg",
        "plugins/strategy/mitogen_linear.py",
        "overlay.yml",
    ],
)
def test_a_changed_file_that_reaches_the_image_changes_the_fingerprint(project, path):
    before = compute(project).digest
    with appended(project / path):
        assert compute(project).digest != before


@pytest.mark.parametrize(
    "path",
    [
        "roles/openmpi/molecule/default/converge.yml",
        "roles/openmpi/README.md",
        "roles/nccl_tests/tasks/main.yml",
    ],
)
def test_tests_docs_and_roles_that_do_not_run_leave_it_unchanged(project, path):
    before = compute(project).digest
    with appended(project / path):
        assert compute(project).digest == before


def test_only_a_verified_record_names_an_image(tmp_path, project):
    digest = compute(project)
    assert fingerprint.verified_image(digest.digest, tmp_path) is None
    fingerprint.record_verified(digest, "sha256:" + "f" * 64, tmp_path)
    assert fingerprint.verified_image(digest.digest, tmp_path) == "sha256:" + "f" * 64
    record = json.loads((tmp_path / f"{digest.digest}.json").read_text())
    assert record["inputs"] == json.loads(json.dumps(digest.inputs))
    (tmp_path / f"{digest.digest}.json").write_text("{broken")
    assert fingerprint.verified_image(digest.digest, tmp_path) is None


def test_a_recorded_image_is_reused_only_while_it_carries_the_fingerprint(monkeypatch, tmp_path):
    monkeypatch.setenv("EFA_IMAGE_CACHE", str(tmp_path))
    digest = fingerprint.Fingerprint("d" * 64, {})
    image = "sha256:" + "e" * 64
    fingerprint.record_verified(digest, image)
    labels = {image: {fingerprint.LABEL: "d" * 64}}
    monkeypatch.setattr(images, "label", lambda ref, name: labels.get(ref, {}).get(name))
    assert build.reusable_image("d" * 64) == image
    # Removed (or rebuilt under the same tag with other inputs): not reused.
    labels.clear()
    assert build.reusable_image("d" * 64) is None
