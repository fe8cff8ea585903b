"""Role hygiene the linters do not check: argument specs, defaults and READMEs agree."""

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

import roledocs

ROOT = Path(__file__).resolve().parents[1]
ROLES = roledocs.roles(ROOT)


def test_there_are_roles():
    assert {"artifact", "common"} <= {role.name for role in ROLES}


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_argument_specs_match_defaults(role):
    defaults = yaml.safe_load((role / "defaults/main.yml").read_text()) or {}
    options = roledocs.load_specs(role)["main"]["options"]
    assert set(options) == set(defaults)
    for name, option in options.items():
        assert option.get("default") == defaults[name], name
        assert option.get("description"), f"{name} has no description"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_other_entry_points_agree_with_main(role):
    specs = roledocs.load_specs(role)
    for entry, spec in specs.items():
        for name, option in spec.get("options", {}).items():
            assert option == specs["main"]["options"][name], f"{entry}: {name}"


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_public_variables_carry_the_role_prefix(role):
    defaults = yaml.safe_load((role / "defaults/main.yml").read_text()) or {}
    assert all(name.startswith(f"{role.name}_") for name in defaults)
    private = yaml.safe_load((role / "vars/main.yml").read_text()) or {}
    assert all(name.startswith(f"_{role.name}_") for name in private)


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_readme_table_is_current(role):
    readme = (role / "README.md").read_text()
    expected = roledocs.updated_readme(readme, roledocs.render(roledocs.load_specs(role)))
    assert readme == expected, f"run `make docs` to update {role.name}/README.md"


def test_updated_readme_requires_markers():
    with pytest.raises(ValueError, match="markers"):
        roledocs.updated_readme("# no markers\n", "table")


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_dependencies_live_in_meta(role):
    meta = yaml.safe_load((role / "meta/main.yml").read_text())
    assert "dependencies" in meta
    defaults_text = (role / "defaults/main.yml").read_text()
    assert "dependencies" not in defaults_text


PHASES = {"preflight", "install", "configure", "verify"}


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_phase_of_main_carries_its_tag(role):
    """`--tags verify` re-verifies a host: each phase is tagged, dynamic ones with `apply`."""
    for task in yaml.safe_load((role / "tasks/main.yml").read_text()):
        tags = set(task.get("tags", []))
        assert len(tags & PHASES) == 1, f"{role.name}: {task['name']!r} tags {sorted(tags)}"
        include = task.get("ansible.builtin.include_tasks")
        if include is not None:
            assert isinstance(include, dict), f"{role.name}: {task['name']!r} needs apply: tags"
            assert set(include["apply"]["tags"]) == tags & PHASES
        # Preflight sets the facts every other phase reads.
        assert ("preflight" in tags) == ("always" in tags)


def make_dry_run(root, *goals):
    """The commands `make GOALS` would run (make -n), as make itself resolves the Makefile."""
    proc = subprocess.run(
        ["make", "-n", "-C", str(root), *goals], capture_output=True, text=True, check=True
    )
    return proc.stdout


def make_variable(root, name):
    """A variable's value as make expands it."""
    probe = f"print-variable: ; @echo $({name})"
    proc = subprocess.run(
        ["make", "-s", "-C", str(root), "--eval", probe, "print-variable"],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.split()


def test_make_test_runs_every_scenario_and_image_test_once(root):
    """A scenario or image test that make test left out would silently stop running;
    the only ones left out are those a flavour's scenario covers, which must exist."""
    commands = make_dry_run(root, "test-steps")
    found = root.glob("roles/*/molecule/*/molecule.yml")
    scenarios = sorted(f"{path.parts[-4]}/{path.parts[-2]}" for path in found)
    scenarios += sorted(path.parent.name for path in root.glob("molecule/*/molecule.yml"))
    covered = [
        step.removeprefix("molecule@")
        for step in make_variable(root, "COVERED_BY_FLAVOUR_SCENARIOS")
    ]
    assert covered and set(covered) <= set(scenarios)
    started = re.findall(r"molecule@(\S+?)[:;' ].*molecule test --scenario-name", commands)
    assert sorted(started) == sorted(set(scenarios) - set(covered))
    image_tests = sorted(str(p.relative_to(root)) for p in root.glob("tests/image/test_*.py"))
    sessions = re.findall(r"pytest -v -rP --durations=20 (.*)$", commands, re.M)
    assert sorted(path for session in sessions for path in session.split()) == image_tests


def test_make_lets_python_keep_compiled_bytecode(root):
    """The virtualenv is compiled on first use: make must not pass on PYTHONDONTWRITEBYTECODE,
    or every Ansible and molecule process compiles its imports from source again."""
    probe = subprocess.run(
        [
            "make",
            "-s",
            "-C",
            str(root),
            "--eval",
            'bytecode-probe: ; @echo "[$$PYTHONDONTWRITEBYTECODE]"',
            "bytecode-probe",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        check=True,
    )
    assert probe.stdout.strip() == "[]"
