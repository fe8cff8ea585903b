"""Image tests: real `efa-image build` runs, minutes each, run by `make test`'s image-tests steps.

They need the Docker engine, the base image and the CI mirror, which those steps
prepare; a plain `pytest` (the unit stage) skips them with this reason.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ENABLED = os.environ.get("EFA_IMAGE_IMAGE_TESTS") == "1"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if ENABLED:
        return
    skip = pytest.mark.skip(
        reason="image builds run in `make test`'s image-tests steps (EFA_IMAGE_IMAGE_TESTS=1)"
    )
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(skip)
