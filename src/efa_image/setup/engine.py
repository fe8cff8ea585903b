"""A Docker engine that answers: use a running one, else start dockerd."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from efa_image.errors import EfaImageError
from efa_image.paths import state_dir
from efa_image.runner import log
from efa_image.setup import dockerroot

STALE_PID_FILES = (Path("/var/run/docker.pid"), Path("/var/run/docker/containerd/containerd.pid"))


def docker_answers(timeout: float = 10.0, host: str | None = None) -> bool:
    """True when `docker info` reaches a daemon (DOCKER_HOST's, or host) within timeout seconds."""
    if shutil.which("docker") is None:
        return False
    env = {**os.environ, "DOCKER_HOST": host} if host else None
    try:
        proc = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            env=env,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return proc.returncode == 0


def pid_alive(pid: int) -> bool:
    """A zombie (killed, not yet reaped) counts as dead."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def remove_stale_pid_files(pid_files: tuple[Path, ...] = STALE_PID_FILES) -> list[Path]:
    """A killed dockerd leaves its pid file behind and a new one refuses to start."""
    removed = []
    for pid_file in pid_files:
        try:
            pid = int(pid_file.read_text().strip() or "0")
        except (FileNotFoundError, ValueError):
            continue
        if pid <= 0 or not pid_alive(pid):
            pid_file.unlink(missing_ok=True)
            removed.append(pid_file)
    return removed


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log written)"


def prepare_data_root() -> str:
    """A journal for the data root where it lacks one (dockerroot); never fatal: it saves time."""
    try:
        return dockerroot.prepare()
    except (EfaImageError, OSError) as exc:
        return f"data root left where it is: {exc}"


def ensure_docker(wait_seconds: float = 60.0) -> str:
    """Return how the engine was found ('running' or 'started'); raise if none comes up."""
    if docker_answers():
        return "running"
    if host := os.environ.get("DOCKER_HOST"):
        # Starting the default engine would not help: the client talks to host.
        raise EfaImageError(
            f"no Docker engine answers at DOCKER_HOST={host}: start that engine, "
            "or unset DOCKER_HOST to use (and start) this machine's"
        )
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise EfaImageError(
            "no Docker engine answers and dockerd is not installed: "
            "run `make setup` as root (installs docker.io)"
        )
    for pid_file in remove_stale_pid_files():
        log.info("removed stale %s", pid_file)
    print(prepare_data_root(), flush=True)
    log_dir = state_dir()
    log_dir.mkdir(parents=True, exist_ok=True)
    start_dockerd([dockerd], log_dir / "dockerd.log", wait_seconds=wait_seconds)
    return "started"


def start_dockerd(
    argv: Sequence[str], log_path: Path, wait_seconds: float = 60.0, host: str | None = None
) -> None:
    """Start dockerd (argv) in the background, logging to log_path, and wait until host
    (or DOCKER_HOST's engine) answers; raise with the log's last lines if it does not."""
    print(f"starting dockerd in the background (log: {log_path})", flush=True)
    with log_path.open("ab") as log_file:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        if docker_answers(timeout=5, host=host):
            return
        if proc.poll() is not None:
            raise EfaImageError(
                f"dockerd exited with {proc.returncode} while starting; "
                f"last lines of {log_path}:\n{_tail(log_path)}"
            )
        time.sleep(1)
    raise EfaImageError(
        f"dockerd did not answer within {wait_seconds:g}s; last lines of {log_path}:\n"
        f"{_tail(log_path)}"
    )
