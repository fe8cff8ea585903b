"""The SageMaker Python SDK v3, pinned, in a virtualenv of its own (its dependencies
are not the project's), for the image tests that run its local-container jobs
(tests/image/sdk_v3_job.py). Made once; an exclusive lock keeps two test sessions
of make test from making it at the same time.

Every local-container job of the SDK puts its hosts algo-1..N on the one network
`sagemaker-local` under those names: two jobs at once (test_sagemaker_image.py and
test_torchrun_image.py run side by side in make test) would resolve each other's
hosts. `one_local_job()` runs them one at a time across processes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from efa_image.filelock import exclusive
from efa_image.paths import project_root

SDK_V3 = "sagemaker==3.27.0"
SDK_V3_VENV = project_root() / ".cache" / "sagemaker-sdk-v3"
SDK_V3_JOB = Path(__file__).with_name("sdk_v3_job.py")


def sdk_v3_python() -> Path:
    python, marker = SDK_V3_VENV / "bin" / "python", SDK_V3_VENV / "efa-image-installed"
    SDK_V3_VENV.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(SDK_V3_VENV.parent / "sagemaker-sdk-v3.lock"):
        if not marker.is_file() or marker.read_text() != SDK_V3:
            uv = str(Path(sys.executable).with_name("uv"))
            subprocess.run(
                [uv, "venv", "-q", "--python", "/usr/bin/python3", str(SDK_V3_VENV)], check=True
            )
            subprocess.run(
                [uv, "pip", "install", "-q", "--python", str(python), SDK_V3], check=True
            )
            marker.write_text(SDK_V3)
    return python


@contextmanager
def one_local_job() -> Iterator[None]:
    """Hold while a local-container job runs: one at a time on this machine."""
    SDK_V3_VENV.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(SDK_V3_VENV.parent / "sagemaker-local-network.lock"):
        yield
