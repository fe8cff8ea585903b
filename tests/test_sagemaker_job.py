"""The job runner's wait for the master (tests/sagemaker_job.py), with docker faked:
a launcher that had children and then outlived them all, or that still runs long
after its abort report, counts as hung and is stopped; one that exits, one that
has not started its ranks yet, and one whose ranks still run do not."""

from __future__ import annotations

import time

import pytest

import sagemaker_job


@pytest.fixture
def container(monkeypatch):
    """A fake master container: its exit status once it ends, its log, what its
    launcher's children number at each poll (the last repeats), the stops."""
    state = {"rc": -1, "log": "", "children": [None], "stopped": []}

    def wait(name: str, seconds: float) -> int:
        time.sleep(min(seconds, 0.01))
        return state["rc"]

    def children(name: str) -> int | None:
        counts = state["children"]
        return counts.pop(0) if len(counts) > 1 else counts[0]

    monkeypatch.setattr(sagemaker_job, "_wait", wait)
    monkeypatch.setattr(sagemaker_job, "_launcher_children", children)
    monkeypatch.setattr(sagemaker_job, "_logs", lambda name: state["log"])
    monkeypatch.setattr(
        sagemaker_job.subprocess, "run", lambda argv, **kw: state["stopped"].append(argv)
    )
    monkeypatch.setattr(sagemaker_job, "LAUNCHER_ORPHANED_SECONDS", 0.05)
    monkeypatch.setattr(sagemaker_job, "ABORT_GRACE_SECONDS", 0.1)
    return state


def test_a_master_that_exits_is_not_hung(container):
    container["rc"] = 1
    assert sagemaker_job._wait_master("m", time.monotonic() + 5) == (1, False)
    assert container["stopped"] == []


def test_a_launcher_that_outlives_its_children_is_hung_and_stopped(container):
    container["children"] = [None, 0, 3, 3, 1, 0]
    started = time.monotonic()
    assert sagemaker_job._wait_master("m", started + 5) == (-1, True)
    assert time.monotonic() - started < 2
    assert container["stopped"] == [["docker", "stop", "--time", "5", "m"]]


def test_a_launcher_still_running_after_its_abort_report_is_hung_and_stopped(container):
    """Hung with a child still alive (seen once here): only the report tells."""
    container["children"] = [3, 1]
    container["log"] = (
        "prterun has exited due to process rank 3 with PID 46 on node algo-2 calling\n"
        '"abort". This may have caused other processes in the application to be'
    )
    started = time.monotonic()
    assert sagemaker_job._wait_master("m", started + 5) == (-1, True)
    assert time.monotonic() - started < 2
    assert container["stopped"] == [["docker", "stop", "--time", "5", "m"]]


def test_a_launcher_before_its_ranks_start_is_not_hung(container):
    """prterun runs a moment before it starts the ranks: no children is no sign yet."""
    container["children"] = [0]
    started = time.monotonic()
    assert sagemaker_job._wait_master("m", started + 0.3) == (-1, False)
    assert container["stopped"] == []


def test_a_launcher_whose_ranks_run_until_the_deadline_is_not_hung(container):
    container["children"] = [3, 0, 3]
    started = time.monotonic()
    assert sagemaker_job._wait_master("m", started + 0.3) == (-1, False)
    assert time.monotonic() - started >= 0.3
    assert container["stopped"] == []


# /proc/PID/stat lines as the master container lists them while prterun hangs
# (seen here): its ssh to the other host is a zombie, the ranks are gone.
HUNG = """1 (train) S 0 1 1 0 -1 4194560
19 (sshd) S 1 19 19 0 -1 4194560
36 (prterun) S 1 1 1 0 -1 4194560
39 (ssh) Z 36 1 1 0 -1 4227084
46 (sh) R 0 46 46 0 -1 4194560
"""


def test_count_launcher_children_skips_zombies_and_odd_names():
    assert sagemaker_job.count_launcher_children(HUNG) == 0
    running = HUNG.replace("39 (ssh) Z 36", "39 (ssh) S 36") + "52 (python (rank 0)) R 36 1\n"
    assert sagemaker_job.count_launcher_children(running) == 2
    assert sagemaker_job.count_launcher_children(HUNG.replace("prterun", "mpirun")) is None
    assert sagemaker_job.count_launcher_children("") is None
