"""Builds that do not finish: a role failing mid-build, and a build killed while it
compiles, whose container the next build removes.

Neither depends on the build cache. make test runs them after
tests/image/test_distro_profile.py, whose distro image's unchanged rebuild is
the next build here.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import threading
import time

from imagebuild import build_argv, build_containers, docker

# The killed build's process, for the next build that must clean up after it.
KILLED: dict[str, int] = {}


def test_failing_role_leaves_no_image_and_shows_ansibles_error():
    """A provider whose dependencies are missing makes libfabric's configure fail mid-build."""
    providers = '{"efa_libfabric_providers": ["efa", "tcp", "psm3"]}'
    proc = subprocess.Popen(
        build_argv("--extra-var", providers),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output, _ = proc.communicate()
    assert proc.returncode != 0
    assert "no image was committed or tagged. Ansible reported:" in output
    # The shared build path (common's build_component) runs libfabric's steps.
    assert "TASK [common : Run the build steps of libfabric]" in output
    reported = output.split("Ansible reported:")[-1]
    assert "(item=configure)" in reported
    # The first failing step ends the steps: no make after a failed configure.
    assert "(item=make)" not in reported
    assert "psm3" in reported
    # No image carries this build's fingerprint (other steps of make test build
    # images of the same flavour and profile meanwhile).
    fingerprint = re.search(r"efa_image_fingerprint=([0-9a-f]{64})", output)
    assert fingerprint, output[-3000:]
    label = f"label=org.efa-image.fingerprint={fingerprint.group(1)}"
    assert docker("images", "-aq", "--filter", label).split() == []
    assert build_containers(proc.pid) == []


def read_lines(stream, lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def test_build_killed_during_a_compile_leaves_its_container():
    """SIGKILL to the whole build (efa-image, packer, ansible) during libfabric's build steps.

    Without the build cache (an earlier stage may have cached libfabric) and with
    --rebuild (an identical image may already be verified).
    """
    proc = subprocess.Popen(
        build_argv("--build-cache", "off", "--rebuild"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=read_lines, args=(proc.stdout, lines), daemon=True).start()
    deadline, seen = time.monotonic() + 900, []
    try:
        while time.monotonic() < deadline:
            line = lines.get(timeout=deadline - time.monotonic())
            assert line is not None, "the build ended before compiling:\n" + "".join(seen[-40:])
            seen.append(line)
            if "TASK [common : Run the build steps of libfabric]" in line:
                break
        time.sleep(5)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert any("Run the build steps of libfabric" in line for line in seen)
    # The killed build's container stays behind until the next build removes it.
    assert build_containers(proc.pid)
    KILLED["pid"] = proc.pid


def test_the_next_build_removes_the_killed_builds_container():
    """Any build, even one that reuses a verified image, first removes the containers of
    builds whose process is gone (the distro image, built just before in this session)."""
    assert "pid" in KILLED, "the interrupted build did not run"
    proc = subprocess.run(
        build_argv(flavor="efa-reduced", profile="distro"), capture_output=True, text=True
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert "removed build containers of interrupted builds" in output
    assert build_containers(KILLED["pid"]) == []
