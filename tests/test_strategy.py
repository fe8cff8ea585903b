"""Molecule and the Docker builds run Ansible's linear strategy over Mitogen (plugins/strategy)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from localplay import ROOT, run_playbook

# Mitogen's local connection gives up when its interpreter has not answered within
# 30 s, as one starved of CPU may not: this module's plays are not marked `plays`
# (tests/conftest.py).
PLAYS_HAVE_A_DEADLINE = True

# The shell's parent is the Python that runs the module: Mitogen's interpreter names
# itself in its command line, an AnsiballZ run names the module's file.
PLAY = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: Read the command line of the module's interpreter
      ansible.builtin.shell: tr '\\0' ' ' < /proc/$PPID/cmdline
      register: parent
      changed_when: false
    - name: Show it
      ansible.builtin.debug:
        msg: "parent: {{ parent.stdout }}"
"""


def module_parent(tmp_path: Path, strategy: str) -> str:
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    proc = run_playbook(
        play,
        "-c",
        "local",
        # Interpreter discovery over mitogen_local fails here; molecule's and the
        # builds' local tasks run on the controller's Python, named the same way.
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        env={"ANSIBLE_STRATEGY": strategy},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return re.search(r'"parent: ([^"]*)"', proc.stdout).group(1)


def test_mitogen_linear_loads_from_ansible_cfg_and_runs_modules_in_mitogen(tmp_path):
    assert "(mitogen:" in module_parent(tmp_path, "mitogen_linear")


def test_linear_is_the_way_back(tmp_path):
    # A plain interpreter: ansible.cfg's pipelining hands it the AnsiballZ payload
    # on stdin, where Mitogen's would name itself.
    parent = module_parent(tmp_path, "linear")
    assert parent.split() == [sys.executable], parent


@pytest.fixture(scope="module")
def molecule_config() -> dict:
    return yaml.safe_load((ROOT / ".config/molecule/config.yml").read_text())


def test_scenarios_name_the_connection_mitogen_takes_over(molecule_config):
    provisioner = molecule_config["provisioner"]
    assert provisioner["connection_options"] == {
        "ansible_connection": "docker",
        "ansible_python_interpreter": "/usr/bin/python3",
    }
    env = provisioner["env"]
    assert env["ANSIBLE_STRATEGY"] == "${EFA_IMAGE_ANSIBLE_STRATEGY:-mitogen_linear}"
    # Molecule's project directory is the role's (the repository root ../.. from it),
    # or the root itself for the flavour scenarios (its .env.yml says `.`).
    for project, root in (("roles/efa", "../.."), (".", ".")):
        plugins = (
            env["ANSIBLE_STRATEGY_PLUGINS"]
            .replace("${MOLECULE_PROJECT_DIRECTORY}", project)
            .replace("${EFA_IMAGE_MOLECULE_ROOT:-../..}", root)
        )
        assert (ROOT / plugins / "mitogen_linear.py").resolve().is_file()


def test_docker_builds_name_the_connection_and_strategy():
    build = (ROOT / "packer/build.pkr.hcl").read_text()
    docker = build[: build.index('only = ["docker.image"]')]
    docker = docker[docker.rindex('provisioner "ansible"') :]
    assert "ansible_connection=docker ansible_python_interpreter=/usr/bin/python3" in docker
    assert "ANSIBLE_STRATEGY=${local.ansible_strategy}" in docker
    assert 'var.ansible_strategy : "mitogen_linear"' in build
