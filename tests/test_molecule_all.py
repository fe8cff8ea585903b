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


def lane(
    tmp_path: Path, *args: str, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    calls = tmp_path / "calls"
    molecule = tmp_path / "molecule"
    molecule.write_text(f'#!/bin/sh\necho "$(basename "$PWD") $*" >> {calls}\n')
    molecule.chmod(0o755)
    # `efa-image base` (a scenario's base image) only recorded; the rest is the real one.
    stand_ins = tmp_path / "bin"
    stand_ins.mkdir(exist_ok=True)
    efa_image = stand_ins / "efa-image"
    efa_image.write_text(
        f'#!/bin/sh\nif [ "$1" = base ]; then echo "efa-image $*" >> {calls}; exit 0; fi\n'
        f'exec {Path(sys.executable).parent / "efa-image"} "$@"\n'
    )
    efa_image.chmod(0o755)
    # The containers a real run of the same scenario has (their label names it) stay.
    docker = stand_ins / "docker"
    docker.write_text("#!/bin/sh\nexit 0\n")
    docker.chmod(0o755)
    env = {
        **os.environ,
        # ansible-playbook (asked for its version once) from this environment.
        "PATH": f"{stand_ins}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "EFA_IMAGE_STAGE_LOG": str(tmp_path / "stages.tsv"),
        "MOLECULE": str(molecule),
        **(extra_env or {}),
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


def test_a_flavour_scenario_runs_from_the_repository_root(tmp_path):
    """molecule/<flavour>/ is run as `molecule test -s <flavour>` from the root."""
    proc = lane(tmp_path, "flavour/efa-reduced")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert calls(tmp_path) == [
        "efa-image base --image efa-image/base:debian12",
        f"{ROOT.name} test --scenario-name efa-reduced",
    ]
    stages = (tmp_path / "stages.tsv").read_text().splitlines()
    assert [line.split("\t")[0] for line in stages] == ["molecule:flavour/efa-reduced"]


def test_a_flavour_the_mirror_cannot_build_is_skipped_with_the_reason(tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    env = {"EFA_IMAGE_MIRROR": str(mirror), "EFA_IMAGE_CACHE": str(tmp_path / "cache")}
    proc = lane(tmp_path, "flavour/efa", extra_env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert calls(tmp_path) == []
    (stage,) = (tmp_path / "stages.tsv").read_text().splitlines()
    name, _, reason = stage.split("\t")
    assert name == "molecule:flavour/efa"
    assert reason == (
        f"skipped: the mirror ({mirror}) lacks aws_ofi_nccl nccl_tests,"
        " which no reachable source carries"
    )


def test_flavour_names_every_flavour_scenario(tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    env = {"EFA_IMAGE_MIRROR": str(mirror), "EFA_IMAGE_CACHE": str(tmp_path / "cache")}
    assert lane(tmp_path, "flavour", extra_env=env).returncode == 0
    flavours = sorted(path.parent.name for path in (ROOT / "molecule").glob("*/molecule.yml"))
    stages = [
        line.split("\t")[0].removeprefix("molecule:flavour/")
        for line in (tmp_path / "stages.tsv").read_text().splitlines()
    ]
    assert sorted(stages) == flavours
