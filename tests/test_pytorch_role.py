"""The pytorch role without a container: its filters, its compatibility rules, and
its preflight refusals run through Ansible against localhost (nothing installed)."""

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from efa_image.artifacts import lock
from efa_image.compat import rules
from localplay import lock_file, run_playbook

ROOT = Path(__file__).resolve().parents[1]
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def load_filters():
    path = ROOT / "roles/pytorch/filter_plugins/pytorch.py"
    spec = importlib.util.spec_from_file_location("pytorch_filters", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FILTERS = load_filters()


@pytest.mark.parametrize(
    ("filename", "python", "machine", "fits"),
    [
        ("torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl", "3.11", "x86_64", True),
        ("torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl", "3.13", "x86_64", False),
        ("torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl", "3.11", "aarch64", False),
        ("sympy-1.13.1-py3-none-any.whl", "3.13", "aarch64", True),
        ("x-1-cp38-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "3.11", "x86_64", True),
        ("x-1-cp312-abi3-manylinux_2_17_x86_64.whl", "3.11", "x86_64", False),
        ("x-1-py2.py3-none-any.whl", "3.11", "x86_64", True),
        ("x-1-1build-cp311-cp311-linux_x86_64.whl", "3.11", "x86_64", True),
    ],
)
def test_which_wheels_a_python_takes(filename, python, machine, fits):
    assert FILTERS.unsupported_wheels([filename], python, machine) == ([] if fits else [filename])


def test_the_locks_pytorch_set_is_for_debian_12s_python_only(root):
    """Debian 12's Python 3.11 takes every file; Debian 13's 3.13 is refused (preflight)."""
    loaded = lock.load(root / "playbooks/group_vars/all/versions.yml")
    files = [m.filename for m in loaded.select(["pytorch"])]
    assert FILTERS.unsupported_wheels(files, "3.11", "x86_64") == []
    assert "torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl" in FILTERS.unsupported_wheels(
        files, "3.13", "x86_64"
    )
    assert FILTERS.wheel_pythons(files) == ["3.11"]


def measured(loaded, image="2.30.4", built=(2, 21, 5)):
    """The facts the role's verify measures: the image's NCCL, what torch maps, its build."""
    return FILTERS.compatibility({"nccl": image, "torch_nccl": loaded, "torch_nccl_built": built})


def test_one_nccl_newer_than_torchs_build_passes():
    result = measured("2.30.4")
    assert result["violations"] == []
    assert {"torch-nccl-matches-image-nccl", "image-nccl-not-older-than-torch-build"} <= set(
        result["passed"]
    )


def test_torchs_own_nccl_shadowing_the_images_is_a_violation():
    """nvidia-nccl-cu12 2.21.5 loaded through torch's RPATH while the image has 2.30.4."""
    (violation,) = measured("2.21.5")["violations"]
    assert violation.startswith("torch-nccl-matches-image-nccl: torch_nccl 2.21.5 must be == 2.30")
    assert "pytorch/pytorch/issues/122571" in violation


def test_an_image_nccl_older_than_torchs_build_is_a_violation():
    (violation,) = measured("2.18.6", image="2.18.6")["violations"]
    assert violation.startswith(
        "image-nccl-not-older-than-torch-build: nccl 2.18.6 must be >= 2.21.5"
    )


def test_without_torch_facts_the_torch_rules_are_skipped_not_passed():
    result = rules.check({"nccl": "2.30.4"})
    skipped = {s.rule: s.why for s in result.skipped}
    assert skipped["torch-nccl-matches-image-nccl"] == "no torch_nccl fact"
    assert skipped["image-nccl-not-older-than-torch-build"] == "no torch_nccl_built fact"


def test_nccl_codes_read_as_versions():
    assert FILTERS.nccl_version(23004) == "2.30.4"
    assert FILTERS.nccl_version("22105") == "2.21.5"


def preflight(tmp_path, variables, lock_entries=None, env=None, tasks_from="preflight"):
    """The role's preflight (or another task file) against localhost; returns the process."""
    path = lock_file(tmp_path)
    if lock_entries is None:
        path.write_text((ROOT / "playbooks/group_vars/all/versions.yml").read_text())
    else:
        path.write_text(yaml.safe_dump({lock.LOCK_KEY: lock_entries}))
    (tmp_path / "play.yml").write_text(
        textwrap.dedent(f"""\
        - name: Preflight of the pytorch role
          hosts: localhost
          connection: local
          gather_facts: false
          vars:
            ansible_python_interpreter: "{{{{ ansible_playbook_python }}}}"
          tasks:
            - name: Run it
              ansible.builtin.include_role:
                name: pytorch
                tasks_from: {tasks_from}
              vars: {variables!r}
        """)
    )
    return run_playbook(tmp_path / "play.yml", env=env)


def refusal(proc):
    assert proc.returncode != 0, proc.stdout[-3000:]
    return " ".join(proc.stdout.split())


def test_an_unknown_method_is_refused(tmp_path):
    message = refusal(preflight(tmp_path, {"pytorch_method": "conda"}))
    assert "pytorch_method must be one of wheel, present (got conda)" in message


def test_wheels_for_another_python_are_refused_naming_the_fix(tmp_path):
    other = f"cp{sys.version_info.major}{sys.version_info.minor + 2}"
    entries = {
        "pytorch": {
            "kind": "wheelset",
            "version": "2.5.1",
            "role": "pytorch",
            "wheels": [
                {
                    "filename": f"torch-2.5.1-{other}-{other}-manylinux1_x86_64.whl",
                    "urls": ["https://files.example/torch.whl"],
                    "sha256": "a" * 64,
                },
                {
                    "filename": "sympy-1.13.1-py3-none-any.whl",
                    "urls": ["https://files.example/sympy.whl"],
                    "sha256": "b" * 64,
                },
            ],
        }
    }
    proc = preflight(tmp_path, {"pytorch_base_python": sys.executable}, entries)
    message = refusal(proc)
    assert f"(Python {PYTHON}, x86_64): torch-2.5.1-{other}" in message
    assert "sympy" not in message.split("):", 1)[1].split(".", 1)[0]
    assert f'set resolve.python to "{PYTHON}"' in message
    assert "`efa-image lock update pytorch`" in message


# The present method's check (install-present.yml), with the version the
# preflight sets from the lock's set.
PRESENT = {
    "pytorch_method": "present",
    "pytorch_python": sys.executable,
    "__pytorch_version": "2.5.1",
}


def test_present_without_torch_is_refused(tmp_path):
    message = refusal(preflight(tmp_path, PRESENT, tasks_from="install-present"))
    assert "pytorch_method present needs PyTorch 2.5.1 (the lock's pytorch)" in message
    assert "which has no PyTorch (ModuleNotFoundError: No module named 'torch')" in message


def test_present_with_another_torch_is_refused(tmp_path):
    """A base image's PyTorch of another release (its module, at that version)."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text('__version__ = "2.4.0+cu121"\n')
    proc = preflight(tmp_path, PRESENT, env={"PYTHONPATH": str(site)}, tasks_from="install-present")
    assert "which has PyTorch 2.4.0+cu121: use a base image with PyTorch 2.5.1" in refusal(proc)
