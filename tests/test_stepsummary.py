"""The summary at the end of make test (tools/stepsummary.py), on logs as scripts/step
writes them. The failing outputs are excerpts of the tools' own formats (pytest's short
summary, Ansible's default callback, ruff's concise output)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import stepsummary

ROOT = Path(__file__).resolve().parents[1]

PYTEST_FAILURE = """\
tests/image/test_cuda13.py::test_the_base_has_nvcc_13_in_nvidias_layout FAILED
E   AssertionError: Unable to find image 'efa-image/base:debian13-cuda13' locally
=========================== short test summary info ============================
FAILED tests/image/test_cuda13.py::test_the_base_has_nvcc_13_in_nvidias_layout - AssertionErr...
======================== 1 failed, 3 passed in 412.10s =========================
==> image-tests@cuda13: 415.2s wall, 20.1s user + 3.0s system CPU
"""
ANSIBLE_FAILURE = """\
TASK [efa : Build libfabric] ***************************************************
fatal: [instance]: FAILED! => {"changed": false, "msg": "configure: error: no verbs"}
PLAY RECAP *********************************************************************
instance                   : ok=12   changed=3    unreachable=0    failed=1    skipped=0
CRITICAL Ansible return code was 2, command was: ansible-playbook converge.yml
==> molecule@efa/default: 96.0s wall, 50.0s user + 9.0s system CPU
"""


def run_step(tmp_path: Path, name: str, script: str) -> int:
    """scripts/step itself, with a shell script standing in for the step's command."""
    env = {"PATH": "/usr/bin:/bin", "STEP_LOGS": str(tmp_path)}
    step = [str(ROOT / "scripts/step"), name, "bash", "-c", script]
    return subprocess.run(step, env=env, capture_output=True).returncode


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (PYTEST_FAILURE, "FAILED tests/image/test_cuda13.py::test_the_base_has_nvcc_13"),
        (ANSIBLE_FAILURE, 'fatal: [instance]: FAILED! => {"changed": false, "msg": "configure'),
        # As molecule shows it: colours, its frame, and its own complaints before the play.
        (
            "\x1b[31m\x1b[1mCRITICAL\x1b[0m 'molecule/default/molecule.yml' glob failed.\n"
            + "".join(f"  \x1b[2m│\x1b[0m {line}\n" for line in ANSIBLE_FAILURE.splitlines()),
            'fatal: [instance]: FAILED! => {"changed": false',
        ),
        (
            "src/x.py:3:1: I001 [*] Import block is un-sorted\nFound 1 error.\n",
            "src/x.py:3:1: I001",
        ),
        ("efa-image: error: the mirror lacks cuda13_toolkit\n", "efa-image: error: the mirror"),
        (
            "building\nsomething odd\n==> x: 1.0s wall, 0.0s user + 0.0s system CPU\n",
            "something odd",
        ),
    ],
)
def test_the_first_error_line_is_the_one_that_names_the_failure(output, expected):
    assert stepsummary.first_error_line(output.splitlines()).startswith(expected)


def test_failed_and_not_run_steps_are_listed_after_every_steps_time(tmp_path):
    assert run_step(tmp_path, "ruff", "echo clean") == 0
    assert run_step(tmp_path, "image-tests@cuda13", f"cat <<'X'\n{PYTEST_FAILURE}X\nexit 1") == 1
    assert run_step(tmp_path, "molecule@efa/default", f"cat <<'X'\n{ANSIBLE_FAILURE}X\nexit 2") == 2
    assert run_step(tmp_path, "molecule@nccl/default", "echo 'skipped: the mirror lacks nccl'") == 0
    names = ["ruff", "image-tests@cuda13", "molecule@efa/default", "molecule@nccl/default",
             "image-tests@hosts"]  # fmt: skip
    steps = [stepsummary.read_step(tmp_path, name) for name in names]
    assert (tmp_path / "molecule@efa+default.status").read_text() == "2\n"
    assert [s.status for s in steps] == [0, 1, 2, 0, None]
    text = stepsummary.summary(steps)
    print(text)
    lines = text.splitlines()
    assert lines[-3] == "make test: 2 failed, 1 not run"
    assert lines[-2].startswith("  image-tests@cuda13: FAILED tests/image/test_cuda13.py::")
    assert lines[-1].startswith('  molecule@efa/default: fatal: [instance]: FAILED! => {"changed"')
    assert any(
        "molecule@nccl/default" in line and "skipped: the mirror lacks" in line for line in lines
    )
    assert any(
        line.split()[:2] == ["image-tests@hosts", "-"] and "not run" in line for line in lines
    )
    assert stepsummary.main([str(tmp_path), *names]) == 1


def test_all_passed_exits_0(tmp_path, capsys):
    assert run_step(tmp_path, "ruff", "echo clean") == 0
    assert stepsummary.main([str(tmp_path), "ruff", "ruff"]) == 0
    assert capsys.readouterr().out.endswith("make test: all 1 steps passed\n")
