"""The flavour scenarios in molecule/ (`molecule test -s <flavour>` from the root): one
per flavour of flavors.yml, each converging that flavour's playbook on one container,
and the shared base configuration's paths working from the root and from a role."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from efa_image.artifacts import lock
from efa_image.building import flavors

ROOT = Path(__file__).resolve().parents[1]
CATALOG = flavors.load_catalog()
FLAVOURS = sorted(CATALOG.flavors)
SCENARIOS = ROOT / "molecule"
# The verifier's shared checks (molecule/tests/test_flavour.py) name the profile.
PROFILE = "portable"
# Roles whose artifacts no reachable source carries, and the lock entries they need.
MIRROR_ONLY = {
    "aws_ofi_nccl": {"aws_ofi_nccl"},
    "nccl_tests": {"nccl_tests"},
    "smdistributed": {"smdistributed_dataparallel"},
}


def scenario(flavour: str) -> dict:
    return yaml.safe_load((SCENARIOS / flavour / "molecule.yml").read_text())


def test_every_flavour_has_a_scenario_and_every_scenario_a_flavour():
    found = sorted(path.parent.name for path in SCENARIOS.glob("*/molecule.yml"))
    assert found == FLAVOURS


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_converge_runs_the_flavours_playbook_with_the_portable_profile(flavour):
    plays = yaml.safe_load((SCENARIOS / flavour / "converge.yml").read_text())
    assert len(plays) == 1
    play = plays[0]
    assert play["ansible.builtin.import_playbook"] == f"../../playbooks/{flavour}.yml"
    assert (SCENARIOS / flavour / play["ansible.builtin.import_playbook"]).is_file()
    assert play["vars"]["efa_image_profile"] == PROFILE
    # The manifest's base is the container's (the verifier compares them).
    image = scenario(flavour)["provisioner"]["env"]["EFA_IMAGE_SCENARIO_BASE"]
    # ${VARIABLE:-default}: the converge reads the same variable with that default.
    default = re.sub(r"^\$\{\w+:-(.*)\}$", r"\1", image)
    assert default in play["vars"]["efa_image_base_image"], image


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_one_container_converged_idempotent_and_verified(flavour):
    config = scenario(flavour)
    # The base configuration's one platform; the scenario names only its image.
    assert "platforms" not in config
    assert config["provisioner"]["env"]["EFA_IMAGE_SCENARIO_BASE"]
    sequence = config["scenario"]["test_sequence"]
    assert sequence.index("converge") < sequence.index("idempotence") < sequence.index("verify")


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_the_verifier_runs_the_shared_checks_and_role_tests_that_exist(flavour):
    verifier = scenario(flavour)["verifier"]
    tests = (SCENARIOS / flavour / verifier["directory"]).resolve()
    assert tests == SCENARIOS / "tests" and (tests / "test_flavour.py").is_file()
    files = [(tests / path).resolve() for path in verifier.get("additional_files_or_dirs", [])]
    assert all(path.is_file() for path in files), files
    # Each test a scenario leaves out still exists (a renamed one would run unnoticed).
    names = re.findall(r"not (test_\w+)", verifier.get("options", {}).get("k", ""))
    sources = "".join(path.read_text() for path in files)
    assert all(f"def {name}(" in sources for name in names), names


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_flavours_the_ci_mirror_cannot_build_name_what_it_lacks(flavour):
    """make test skips them, with the reason, unless the mirror holds these."""
    needed = set().union(*(MIRROR_ONLY.get(role, set()) for role in CATALOG.roles(flavour)))
    requires = SCENARIOS / flavour / "requires-artifacts"
    listed = set()
    if requires.exists():
        lines = requires.read_text().splitlines()
        listed = {line.strip() for line in lines if line.strip() and not line.startswith("#")}
    assert listed == needed
    assert listed <= set(lock.load(None).artifacts)


def test_the_root_names_its_containers_apart_from_every_roles():
    env = yaml.safe_load((ROOT / ".env.yml").read_text())
    roles = {path.name for path in (ROOT / "roles").iterdir() if path.is_dir()}
    assert env["MOLECULE_ROLE"] == "flavour" and "flavour" not in roles
    assert env["EFA_IMAGE_MOLECULE_ROOT"] == "."


def test_the_base_configurations_paths_hold_from_the_root_and_from_a_role():
    """Every path from the project directory goes through the repository root, which is
    ../.. from roles/<role> and `.` from the root (its .env.yml)."""
    text = (ROOT / ".config" / "molecule" / "config.yml").read_text()
    uses = re.findall(r"\$\{MOLECULE_PROJECT_DIRECTORY\}(\S*)", text)
    assert uses
    for rest in uses:
        assert rest.startswith("/${EFA_IMAGE_MOLECULE_ROOT:-../..}/"), rest
        tail = rest.removeprefix("/${EFA_IMAGE_MOLECULE_ROOT:-../..}/")
        for project, up in ((ROOT / "roles" / "efa", "../.."), (ROOT, ".")):
            assert (project / up / tail).resolve().exists(), (project, tail)


def test_molecule_lists_the_flavour_scenarios_from_the_root():
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "molecule").exists():
        pytest.skip(f"no molecule beside {sys.executable}")
    proc = subprocess.run(
        [str(bin_dir / "molecule"), "list", "--format", "plain"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    listed = {line.split()[0] for line in proc.stdout.splitlines() if line.strip()}
    assert {f"efa-image-flavour-{flavour}" for flavour in FLAVOURS} <= listed, proc.stdout
