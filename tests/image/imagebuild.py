"""What the image tests share: the build they run and the docker state they inspect.

make test runs image-test steps two at a time, so tests look only at images of
their own flavour and profile and at their own builds' containers.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from efa_image.building.images import OWNER_LABEL

FLAVOR = os.environ.get("EFA_IMAGE_TEST_FLAVOR", "efa")
PROFILE = os.environ.get("EFA_IMAGE_TEST_PROFILE", "portable")
MIRROR = os.environ.get("EFA_IMAGE_MIRROR", "")
BASE = os.environ.get("EFA_IMAGE_BASE", "efa-image/base:debian13")
REPOSITORY = "efa-image-test"


def build_argv(
    *extra: str,
    flavor: str = FLAVOR,
    profile: str = PROFILE,
    base: str = BASE,
    repository: str = REPOSITORY,
) -> list[str]:
    argv = [sys.executable, "-m", "efa_image", "build", "--flavor", flavor, "--profile", profile]
    argv += ["--base-image", base, "--repository", repository]
    return argv + (["--mirror", MIRROR] if MIRROR else []) + list(extra)


def docker(*argv: str) -> str:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, check=True).stdout


@functools.cache
def ensure_base(ref: str) -> str:
    """Make the base image ref present (`efa-image base --image`: ours are built from their
    recipe, others pulled) and return it: what a test that runs a base asks for first."""
    argv = [sys.executable, "-m", "efa_image", "base", "--image", ref]
    proc = subprocess.run(argv, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return ref


def in_image(image: str, script: str) -> subprocess.CompletedProcess[str]:
    """`sh -c SCRIPT` in a throw-away container of IMAGE. Never pulled: an image no
    fixture made fails here, in the test that used it, with "No such image"."""
    return subprocess.run(
        ["docker", "run", "--rm", "--pull=never", image, "sh", "-c", script],
        capture_output=True,
        text=True,
    )


def build_containers(pid: int) -> list[str]:
    """The build containers of the efa-image process `pid` (packer labels them)."""
    return docker("ps", "-aq", "--filter", f"label={OWNER_LABEL}=pid:{pid}").split()


def build_and_report(
    report: Path,
    flavor: str = FLAVOR,
    profile: str = PROFILE,
    base: str = BASE,
    repository: str = REPOSITORY,
    rebuild: bool = True,
) -> dict:
    """One real build (--rebuild: an earlier run's verified image would be reused), its
    report with the build's output."""
    argv = build_argv(
        "--report",
        str(report),
        *(["--rebuild"] if rebuild else []),
        flavor=flavor,
        profile=profile,
        base=base,
        repository=repository,
    )
    proc = subprocess.run(argv, capture_output=True, text=True)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    # Shown by make test (pytest -rP): the slowest tasks, each role's total and
    # the build's stages, from the recaps at the end of the build's output.
    recap = output.rfind("PLAY RECAP")
    print(f"{shlex.join(argv)}:\n{output[recap:] if recap >= 0 else output[-3000:]}")
    data = json.loads(report.read_text())
    data["output"] = output
    return data
