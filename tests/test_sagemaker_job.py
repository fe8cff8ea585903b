"""The job runner's wait for the master (efa_image.sagemaker_job), with docker faked:
a launcher that reported an abort and then kept running counts as hung and is
stopped; one that exits, or one that never reports an abort, does not."""

from __future__ import annotations

import time

import pytest

from efa_image import sagemaker_job


@pytest.fixture
def container(monkeypatch):
    """A fake master container: its log, its exit status once it ends, the stops."""
    state = {"log": "", "rc": -1, "stopped": []}

    def wait(name: str, seconds: float) -> int:
        time.sleep(min(seconds, 0.01))
        return state["rc"]

    monkeypatch.setattr(sagemaker_job, "_wait", wait)
    monkeypatch.setattr(sagemaker_job, "_logs", lambda name: state["log"])
    monkeypatch.setattr(
        sagemaker_job.subprocess, "run", lambda argv, **kw: state["stopped"].append(argv)
    )
    monkeypatch.setattr(sagemaker_job, "ABORT_GRACE_SECONDS", 0.05)
    return state


def test_a_master_that_exits_is_not_hung(container):
    container["rc"] = 1
    assert sagemaker_job._wait_master("m", time.monotonic() + 5) == (1, False)
    assert container["stopped"] == []


def test_a_launcher_still_running_after_its_abort_report_is_hung_and_stopped(container):
    container["log"] = (
        "prterun has exited due to process rank 3 with PID 46 on node algo-2 calling\n"
        '"abort". This may have caused other processes in the application to be'
    )
    started = time.monotonic()
    assert sagemaker_job._wait_master("m", started + 5) == (-1, True)
    assert time.monotonic() - started < 2
    assert container["stopped"] == [["docker", "stop", "--time", "5", "m"]]


def test_a_master_without_an_abort_runs_to_the_deadline_and_is_not_hung(container):
    started = time.monotonic()
    assert sagemaker_job._wait_master("m", started + 0.2) == (-1, False)
    assert time.monotonic() - started >= 0.2
    assert container["stopped"] == []
