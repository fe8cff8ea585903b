"""Test support: a SageMaker training job across containers of one image, as SageMaker
starts it (tests/image/test_sagemaker_image.py; not part of the efa_image package).

SageMaker starts one container per instance with `train`, host names algo-1..N,
after writing /opt/ml/input/config/resourceconfig.json (current_host, hosts,
network_interface_name) and hyperparameters.json (every value JSON-encoded) and
unpacking the user's code into /opt/ml/code. Here each host is a container of
the image on a Docker network of the job's own (its host name and network alias
are algo-N), the files are copied in before it starts, and the job's result is
what SageMaker reads: each container's exit status and log, /opt/ml/model and
/opt/ml/output. As SageMaker does, a job whose master (algo-1) failed is ended:
the other hosts are stopped once their MPI daemon is gone (the toolkit's worker
would otherwise poll for the master's status file for 150 s more), and what ran
on them at that moment is kept for the caller to check.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from efa_image.runner import run_command
from efa_image.verification.containers import efa_device_args

# Its own label value: other tests clean up multihost's containers by theirs.
LABEL = "org.efa-image.test=sagemaker-job"
# The toolkit's worker logs this when its host's MPI daemon (orted) has exited.
DAEMON_GONE = "Orted process exited"
# Every process's command line (images need not have ps).
LIST_PROCESSES = 'for f in /proc/[0-9]*/cmdline; do tr "\\0" " " < "$f"; echo; done'
# Open MPI 5's launcher: it starts the ranks on its host and, through ssh, the
# MPI daemons of the others, so while the job runs it has live children; once
# they have all ended it exits a moment later. Open MPI 5.0.7's sometimes does
# not, after a rank's MPI_Abort: its main thread waits in PMIx_server_finalize for
# PMIx's progress thread, which waits for a lock while it handles a late
# direct-modex reply (gdb here), and its ended children stay unreaped. The toolkit
# waits for it, so the job would run until its time limit.
LAUNCHER = "prterun"
# How long the launcher may outlive its last child before the job counts as hung.
# Here, failing-rank jobs three at once with both cores busy: in 24 polled every
# second, each launcher that exited did so within one poll of its last child, and
# the one that hung had not even reported the abort; in 73 more with this check,
# 4 hung that way and were stopped, none that would have ended.
LAUNCHER_ORPHANED_SECONDS = 15.0
# What the launcher logs once a rank has called MPI_Abort and it has ended the job,
# and how long it may run on after that. One of those 73 jobs hung with a child
# still alive, which only this catches (where the report was logged).
ABORT_REPORTED = "has exited due to process rank"
ABORT_GRACE_SECONDS = 45.0
# Every process's /proc/PID/stat line: PID (COMM) STATE PPID ... (images need not have ps).
READ_PROCESS_STATES = 'for f in /proc/[0-9]*/stat; do cat "$f" 2>/dev/null; echo; done'


@dataclass
class HostResult:
    host: str
    rc: int
    log: str
    # Files under /opt/ml/model and /opt/ml/output, by path relative to /opt/ml.
    files: dict[str, str] = field(default_factory=dict)
    # Stopped because the job had failed: its processes' command lines just before.
    stopped_with: str | None = None


@dataclass
class JobResult:
    hosts: list[HostResult]
    seconds: float
    left_running: list[str]
    # The master's launcher hung after an abort and was stopped (_wait_master).
    launcher_hung: bool = False

    def host(self, name: str) -> HostResult:
        return next(h for h in self.hosts if h.host == name)

    @property
    def log(self) -> str:
        return "\n".join(f"===== {h.host} (exit {h.rc})\n{h.log}" for h in self.hosts)


def host_names(count: int) -> list[str]:
    return [f"algo-{i}" for i in range(1, count + 1)]


def resource_config(host: str, hosts: list[str], interface: str = "eth0") -> dict[str, object]:
    """resourceconfig.json as SageMaker writes it on `host`."""
    return {
        "current_host": host,
        "current_instance_type": "local",
        "current_group_name": "homogeneousCluster",
        "hosts": hosts,
        "instance_groups": [
            {"instance_group_name": "homogeneousCluster", "instance_type": "local", "hosts": hosts}
        ],
        "network_interface_name": interface,
    }


def _stage(
    root: Path,
    host: str,
    hosts: list[str],
    hyperparameters: Mapping[str, str],
    code: Mapping[str, str],
) -> Path:
    ml = root / host / "ml"
    (ml / "input" / "config").mkdir(parents=True)
    (ml / "code").mkdir()
    (ml / "input" / "config" / "resourceconfig.json").write_text(
        json.dumps(resource_config(host, hosts))
    )
    (ml / "input" / "config" / "hyperparameters.json").write_text(json.dumps(dict(hyperparameters)))
    (ml / "input" / "config" / "inputdataconfig.json").write_text("{}")
    for name, text in code.items():
        (ml / "code" / name).write_text(text)
    return ml


def _copy_out(container: str, root: Path) -> dict[str, str]:
    files: dict[str, str] = {}
    for part in ("model", "output"):
        target = root / part
        target.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["docker", "cp", f"{container}:/opt/ml/{part}/.", str(target)],
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            continue
        for path in sorted(p for p in target.rglob("*") if p.is_file()):
            files[f"{part}/{path.relative_to(target)}"] = path.read_text(errors="replace")
    return files


def run_job(
    image: str,
    hyperparameters: Mapping[str, str],
    code: Mapping[str, str],
    count: int = 2,
    timeout: float = 600.0,
) -> JobResult:
    """Start `train` in `count` containers, wait for all of them, collect what they left."""
    job = uuid.uuid4().hex[:8]
    network = f"efa-image-sm-{job}"
    hosts = host_names(count)
    containers = {host: f"efa-sm-{job}-{host}" for host in hosts}
    devices = efa_device_args()
    started = time.monotonic()
    run_command(["docker", "network", "create", "--label", LABEL, network])
    try:
        with tempfile.TemporaryDirectory(prefix="efa-image-sm-") as scratch:
            root = Path(scratch)
            for host, name in containers.items():
                where = ["--name", name, "--hostname", host, "--network", network]
                where += ["--network-alias", host, "--label", LABEL]
                run_command(["docker", "create", *where, *devices, image, "train"])
                ml = _stage(root, host, hosts, hyperparameters, code)
                run_command(["docker", "cp", f"{ml}/.", f"{name}:/opt/ml"])
            for name in containers.values():
                run_command(["docker", "start", name])
            results: list[HostResult] = []
            hung = False
            for host, name in containers.items():
                stopped_with = None
                if results and results[0].rc != 0:
                    stopped_with = _end_failed(name, started, timeout)
                if results:
                    rc = _wait(name, max(1.0, timeout - (time.monotonic() - started)))
                else:
                    rc, hung = _wait_master(name, started + timeout)
                # Read at once: the master ends first, a worker may wait minutes more.
                files = _copy_out(name, root / host / "out")
                results.append(HostResult(host, rc, _logs(name), files, stopped_with))
            running = subprocess.run(
                ["docker", "ps", "-q", "--filter", f"network={network}"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.split()
            return JobResult(results, time.monotonic() - started, running, hung)
    finally:
        subprocess.run(["docker", "rm", "-f", *containers.values()], capture_output=True)
        subprocess.run(["docker", "network", "rm", network], capture_output=True)


def _logs(name: str) -> str:
    done = subprocess.run(["docker", "logs", name], capture_output=True, text=True, check=False)
    return done.stdout + done.stderr


def _wait(name: str, seconds: float) -> int:
    """The container's exit status; -1 when it is still running after `seconds`."""
    try:
        waited = subprocess.run(
            ["docker", "wait", name], capture_output=True, text=True, timeout=seconds
        )
    except subprocess.TimeoutExpired:
        return -1
    return int(waited.stdout.strip() or -1)


def _wait_master(name: str, deadline: float) -> tuple[int, bool]:
    """The master's exit status, and whether its launcher hung (then the master is
    stopped, status -1): it had children and has outlived them all by
    LAUNCHER_ORPHANED_SECONDS, or it still runs ABORT_GRACE_SECONDS after ABORT_REPORTED."""
    launched = False
    orphaned_since: float | None = None
    reported: float | None = None
    while (left := deadline - time.monotonic()) > 0:
        rc = _wait(name, min(3.0, left))
        if rc != -1:
            return rc, False
        now = time.monotonic()
        if reported is None and ABORT_REPORTED in _logs(name):
            reported = now
        children = _launcher_children(name)
        launched = launched or bool(children)
        if not (launched and children == 0):
            orphaned_since = None
        elif orphaned_since is None:
            orphaned_since = now
        orphaned = orphaned_since is not None and now - orphaned_since > LAUNCHER_ORPHANED_SECONDS
        if orphaned or (reported is not None and now - reported > ABORT_GRACE_SECONDS):
            subprocess.run(["docker", "stop", "--time", "5", name], capture_output=True)
            return -1, True
    return -1, False


def _shell_output(name: str, script: str) -> str:
    """What a shell script run in the container printed (nothing once it has ended)."""
    return subprocess.run(
        ["docker", "exec", name, "sh", "-c", script], capture_output=True, text=True, check=False
    ).stdout


def _launcher_children(name: str) -> int | None:
    """How many live (not zombie) children the container's launcher has; None when
    no launcher runs there."""
    return count_launcher_children(_shell_output(name, READ_PROCESS_STATES))


def count_launcher_children(stat_lines: str) -> int | None:
    """From /proc/PID/stat lines: the launcher's live children, None without a launcher."""
    processes = []
    for line in stat_lines.splitlines():
        if ")" not in line:
            continue
        pid, _, rest = line.partition(" (")
        comm, _, fields = rest.rpartition(") ")
        state, ppid = fields.split()[:2]
        processes.append((int(pid), comm, state, int(ppid)))
    launchers = {pid for pid, comm, _, _ in processes if comm == LAUNCHER}
    if not launchers:
        return None
    return sum(1 for _, _, state, ppid in processes if ppid in launchers and state != "Z")


def _end_failed(name: str, started: float, timeout: float) -> str:
    """A worker of a failed job, as SageMaker ends it: once its MPI daemon is gone (or
    the job's time is up), its processes are read and it is stopped."""
    while DAEMON_GONE not in _logs(name) and time.monotonic() - started < timeout:
        if _wait(name, 2.0) != -1:
            break
    processes = _shell_output(name, LIST_PROCESSES)
    subprocess.run(["docker", "stop", "--time", "5", name], capture_output=True, check=False)
    return processes
