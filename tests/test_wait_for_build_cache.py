"""scripts/wait-for-build-cache: make test's second lane waits for the first lane's Open MPI."""

import os
import select
import subprocess
import sys
import time
from pathlib import Path

from efa_image.building import build_cache

ROOT = Path(__file__).resolve().parents[1]
WAIT = str(ROOT / "scripts" / "wait-for-build-cache")
STAGE = str(ROOT / "scripts" / "stage")


def env(log: Path, cache: Path | str) -> dict[str, str]:
    return {
        # The script asks efa_image where the cache is: this environment's python.
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "EFA_IMAGE_STAGE_LOG": str(log),
        "EFA_IMAGE_BUILD_CACHE": str(cache),
    }


def store(cache: Path, component: str) -> None:
    build_cache.store(cache, component, "0" * 64, lambda path: path.write_bytes(b"tree"))


def start(log: Path, cache: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [WAIT, "openmpi", "image-tests"],
        env=env(log, cache),
        stdout=subprocess.PIPE,
        text=True,
    )


def test_waits_until_this_run_stores_the_entry(tmp_path):
    log, cache = tmp_path / "stages.tsv", tmp_path / "builds"
    subprocess.run([STAGE, "--reset"], env=env(log, cache), check=True)
    store(cache, "libfabric")
    proc = start(log, cache)
    # Stored only once the script says it waits: on a loaded machine its start-up
    # alone took more than a second (make test, 2026-12-03).
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    assert ready, "the script said nothing within 30 s"
    first = proc.stdout.readline()
    assert proc.poll() is None, "returned although only another component is cached: " + first
    assert "waiting for openmpi from stage image-tests" in first
    store(cache, "openmpi")
    output, _ = proc.communicate(timeout=15)
    assert proc.returncode == 0
    assert "openmpi stored by this run" in output


def test_an_entry_from_before_the_run_does_not_count_and_the_stages_end_does(tmp_path):
    log, cache = tmp_path / "stages.tsv", tmp_path / "builds"
    store(cache, "openmpi")
    old = time.time() - 3600
    for path in cache.iterdir():
        os.utime(path, (old, old))
    subprocess.run([STAGE, "--reset"], env=env(log, cache), check=True)
    proc = start(log, cache)
    time.sleep(1)
    assert proc.poll() is None, "took an entry stored before the run"
    subprocess.run([STAGE, "image-tests", "false"], env=env(log, cache), capture_output=True)
    output, _ = proc.communicate(timeout=15)
    assert proc.returncode == 0
    assert "stage image-tests ended without storing openmpi; going on without it" in output


def test_with_the_cache_off_it_does_not_wait(tmp_path):
    proc = subprocess.run(
        [WAIT, "openmpi", "image-tests"],
        env=env(tmp_path / "stages.tsv", "off"),
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert proc.returncode == 0
    assert proc.stdout == "build cache off: not waiting for openmpi\n"
