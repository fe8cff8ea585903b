"""Run commands in a container: an existing one, or a throw-away one of an image."""

from __future__ import annotations

import glob
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from efa_image.runner import run_command
from efa_image.verify import Outcome, Run


def exec_in(container: str) -> Run:
    def run(command: str) -> Outcome:
        proc = subprocess.run(
            ["docker", "exec", container, "/bin/sh", "-c", command],
            capture_output=True,
            text=True,
            check=False,
        )
        return Outcome(proc.returncode, proc.stdout, proc.stderr)

    return run


def efa_device_args() -> list[str]:
    """`--device` options for the host's EFA devices (none where there is no EFA)."""
    devices = sorted(glob.glob("/dev/infiniband/uverbs*"))
    return [arg for dev in devices for arg in ("--device", dev)]


@contextmanager
def target(container: str | None, image: str | None, gpus: bool = False) -> Iterator[Run]:
    if container:
        yield exec_in(container)
        return
    name = f"efa-image-verify-{uuid.uuid4().hex[:8]}"
    # HARDWARE: on an EFA instance the devices are passed in, as SageMaker and ECS do.
    devices = efa_device_args()
    # HARDWARE: GPUs through the NVIDIA container toolkit (docker run --gpus).
    gpu = ["--gpus", "all"] if gpus else []
    run_command(
        ["docker", "run", "-d", "--rm", "--name", name, *devices, *gpu, str(image), "sleep", "3600"]
    )
    try:
        yield exec_in(name)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
