import shutil
import subprocess
import time

import pytest

from efa_image.errors import EfaImageError
from efa_image.setup import engine


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_stale_pid_files_are_removed_live_ones_kept(tmp_path):
    stale, live, garbage, absent = (tmp_path / n for n in ("stale", "live", "garbage", "absent"))
    stale.write_text(f"{dead_pid()}\n")
    live.write_text("1\n")
    garbage.write_text("not a pid")
    removed = engine.remove_stale_pid_files((stale, live, garbage, absent))
    assert removed == [stale]
    assert not stale.exists() and live.exists() and garbage.exists()


def test_pid_file_of_a_zombie_is_stale(tmp_path):
    # A killed dockerd whose parent has not reaped it still has a /proc entry.
    zombie = subprocess.Popen(["true"])
    time.sleep(0.3)
    pid_file = tmp_path / "docker.pid"
    pid_file.write_text(str(zombie.pid))
    try:
        assert engine.remove_stale_pid_files((pid_file,)) == [pid_file]
    finally:
        zombie.wait()


def test_no_dockerd_names_the_fix(monkeypatch):
    monkeypatch.setattr(engine, "docker_answers", lambda timeout=10.0, host=None: False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(EfaImageError, match=r"dockerd is not installed: run `make setup`"):
        engine.ensure_docker()


@pytest.fixture
def fake_dockerd(monkeypatch, tmp_path):
    """Install a stand-in dockerd script (generic process mechanics, not Docker)."""

    def install(body: str):
        fake = tmp_path / "dockerd"
        fake.write_text(f"#!/bin/sh\n{body}\n")
        fake.chmod(0o755)
        monkeypatch.setenv("EFA_IMAGE_STATE_DIR", str(tmp_path / "state"))
        # The stand-in must not move this machine's Docker data root (test_dockerroot.py
        # tries that on a scratch directory).
        monkeypatch.setenv("EFA_IMAGE_DOCKER_ROOT", "host")
        monkeypatch.setattr(engine, "docker_answers", lambda timeout=10.0, host=None: False)
        monkeypatch.setattr(engine, "STALE_PID_FILES", ())
        monkeypatch.setattr(shutil, "which", lambda name: str(fake) if name == "dockerd" else None)
        return fake

    return install


def test_dockerd_that_exits_shows_its_log(fake_dockerd):
    fake_dockerd("echo 'failed to start daemon: boom' >&2\nexit 1")
    with pytest.raises(EfaImageError, match=r"(?s)dockerd exited with 1.*failed to start daemon"):
        engine.ensure_docker(wait_seconds=10)


def test_dockerd_that_never_answers_times_out(fake_dockerd):
    fake = fake_dockerd("echo 'waiting forever'\nexec sleep 30")
    with pytest.raises(EfaImageError, match=r"(?s)did not answer within 2s.*waiting forever"):
        engine.ensure_docker(wait_seconds=2)
    subprocess.run(["pkill", "-f", str(fake)], check=False)
