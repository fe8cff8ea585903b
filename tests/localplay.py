"""Run a playbook against localhost with this checkout's roles (generic mechanics only).

The role tests run ``ansible-playbook`` from the test's own virtual environment, with
the roles and ansible.cfg of this checkout (not whatever the caller's environment or
home directory points at) and with no lock overlay inherited from the caller
(``EFA_IMAGE_LOCK_OVERLAY`` emptied), so a play sees only the lock the test wrote.

The plays run under mitogen_linear, the strategy of the image builds and molecule
(plugins/strategy/mitogen_linear.py): one Python for the play's modules instead of
one per task, each compiling Ansible's module code from its zip again. The rmm
preflight's 143 tasks took 11.4 CPU-seconds instead of 19-22 here; the role tests'
files together 48 instead of 57. EFA_IMAGE_ANSIBLE_STRATEGY=linear runs Ansible's
own strategy instead, as for molecule and the image builds (make test's idle-priority
unit-plays stage does); tests/test_strategy.py runs both.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def run_playbook(
    play: Path,
    *options: str,
    env: Mapping[str, str] | None = None,
    timeout: int = 300,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``play`` on localhost with ``options`` before it; ``env`` is added last."""
    playbook = Path(sys.executable).with_name("ansible-playbook")
    return subprocess.run(
        [str(playbook), "-i", "localhost,", *options, str(play)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={
            **os.environ,
            "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
            "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "EFA_IMAGE_LOCK_OVERLAY": "",
            "ANSIBLE_STRATEGY": os.environ.get("EFA_IMAGE_ANSIBLE_STRATEGY", "mitogen_linear"),
            **(env or {}),
        },
    )


def lock_file(play_dir: Path) -> Path:
    """Where a play in ``play_dir`` finds the lock: ``group_vars/all/`` beside the
    playbook, as the image playbooks find playbooks/group_vars/all/versions.yml.

    Not the play's vars_files: ansible-core reads and parses those again for every
    task (uncached unless vaulted), the whole lock before each of the rmm
    preflight's 143 tasks; group_vars files are parsed once.
    """
    path = play_dir / "group_vars" / "all" / "lock.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def localhost_play(play_dir: Path, name: str, tasks: list[dict]) -> Path:
    """play.yml in ``play_dir``: ``tasks`` on localhost (connection local, no facts),
    modules on the controller's Python, as the role tests' plays run."""
    play = [
        {
            "name": name,
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}"},
            "tasks": tasks,
        }
    ]
    path = play_dir / "play.yml"
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    return path
