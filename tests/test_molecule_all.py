"""scripts/molecule-all --shared: make test's two lanes end with one list of scenarios,
each run by the lane that claims it first.

MOLECULE points at a stand-in that only records its calls (generic process
mechanics): the scenario's own steps are what `make test` runs.
"""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MOLECULE_ALL = str(ROOT / "scripts" / "molecule-all")
STAGE = str(ROOT / "scripts" / "stage")
SCENARIO = "artifact/default"


def lane(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    calls = tmp_path / "calls"
    molecule = tmp_path / "molecule"
    molecule.write_text(f'#!/bin/sh\necho "$(basename "$PWD") $*" >> {calls}\n')
    molecule.chmod(0o755)
    env = {
        **os.environ,
        # ansible-playbook (asked for its version once) from this environment.
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "EFA_IMAGE_STAGE_LOG": str(tmp_path / "stages.tsv"),
        "MOLECULE": str(molecule),
    }
    return subprocess.run([MOLECULE_ALL, *args], env=env, capture_output=True, text=True)


def calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_the_first_lane_runs_a_shared_scenario_and_the_second_leaves_it(tmp_path):
    first = lane(tmp_path, "--shared", SCENARIO)
    assert first.returncode == 0, first.stdout + first.stderr
    second = lane(tmp_path, "--shared", SCENARIO)
    assert second.returncode == 0, second.stdout + second.stderr
    assert calls(tmp_path) == ["artifact test --scenario-name default"]
    assert f"molecule:{SCENARIO}: run by the other lane" in second.stdout
    stages = (tmp_path / "stages.tsv").read_text().splitlines()
    assert [line.split("\t")[0] for line in stages] == [f"molecule:{SCENARIO}"]


def test_a_run_without_shared_ignores_claims(tmp_path):
    (tmp_path / "stages.tsv.claims" / "artifact_default").mkdir(parents=True)
    proc = lane(tmp_path, SCENARIO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert calls(tmp_path) == ["artifact test --scenario-name default"]


def test_reset_forgets_the_claims(tmp_path):
    assert lane(tmp_path, "--shared", SCENARIO).returncode == 0
    env = {**os.environ, "EFA_IMAGE_STAGE_LOG": str(tmp_path / "stages.tsv")}
    subprocess.run([STAGE, "--reset"], env=env, check=True)
    assert not (tmp_path / "stages.tsv.claims").exists()
    assert lane(tmp_path, "--shared", SCENARIO).returncode == 0
    assert len(calls(tmp_path)) == 2
