"""Run commands in a container: an existing one, or a throw-away one of an image."""

from __future__ import annotations

import glob
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from efa_image.errors import EfaImageError
from efa_image.runner import CommandError, run_command
from efa_image.verification.verify import Outcome, Run

MANIFEST = "/opt/efa-image/manifest.json"


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


def _docker(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, check=False)


def _docker_error(proc: subprocess.CompletedProcess[str] | CommandError) -> str:
    """Docker's reason, without its advice to read `docker run --help`."""
    text = proc.output if isinstance(proc, CommandError) else proc.stdout + proc.stderr
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    reason = next((line for line in lines if "rror" in line), lines[-1] if lines else "")
    return reason.removeprefix("docker: ").removeprefix("Error response from daemon: ")


def ensure_image(image: str) -> None:
    """The image is here, or pulled; else one line that names the fix."""
    if _docker("image", "inspect", image).returncode == 0:
        return
    pulled = _docker("pull", "--quiet", image)
    if pulled.returncode != 0:
        raise EfaImageError(
            f"no image {image} here, and it could not be pulled ({_docker_error(pulled)}): "
            "build it (efa-image build), load it (docker load) or check its name (docker images)"
        )


@contextmanager
def target(container: str | None, image: str | None, gpus: bool = False) -> Iterator[Run]:
    """A running container to verify: the one named, or a throw-away one of the image.

    Each way a target cannot be verified stops with one line that names the fix: no
    such container or image, an image this project did not build (no manifest), and
    for --perf (gpus) no GPU.
    """
    if container:
        state = _docker("inspect", "--format", "{{.State.Running}}", container)
        if state.stdout.strip() != "true":
            raise EfaImageError(
                f"no running container {container}: start one (docker run -d IMAGE sleep "
                "infinity) or verify the image itself (--image IMAGE)"
            )
        run = exec_in(container)
        _check_target(run, container, gpus)
        yield run
        return
    ensure_image(str(image))
    name = f"efa-image-verify-{uuid.uuid4().hex[:8]}"
    # HARDWARE: on an EFA instance the devices are passed in, as SageMaker and ECS do.
    devices = efa_device_args()
    # HARDWARE: GPUs through the NVIDIA container toolkit (docker run --gpus).
    gpu = ["--gpus", "all"] if gpus else []
    argv = ["docker", "run", "-d", "--rm", "--name", name, *devices, *gpu, str(image)]
    try:
        run_command([*argv, "sleep", "3600"])
    except CommandError as exc:
        fix = (
            "--perf needs GPUs in the container: install the NVIDIA container toolkit on a GPU "
            "host, or leave out --perf"
            if gpus
            else "check that the image runs (docker run --rm IMAGE true)"
        )
        raise EfaImageError(f"could not start {image} ({_docker_error(exc)}): {fix}") from None
    try:
        run = exec_in(name)
        _check_target(run, str(image), gpus)
        yield run
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


def _check_target(run: Run, what: str, gpus: bool) -> None:
    if run(f"test -f {MANIFEST}").rc != 0:
        raise EfaImageError(
            f"{what} has no {MANIFEST}: efa-image did not build it, so there is nothing to "
            f"verify against; build one on it (efa-image build --base-image {what})"
        )
    if gpus and run("nvidia-smi -L").rc != 0:
        raise EfaImageError(
            f"--perf needs a GPU, and {what} sees none (nvidia-smi -L failed): run it on a GPU "
            "host with the NVIDIA container toolkit, or leave out --perf"
        )
