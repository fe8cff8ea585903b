from pathlib import Path

import pytest

from localplay import run_playbook

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def root() -> Path:
    return ROOT


def runs_a_play(item: pytest.Item) -> bool:
    return getattr(getattr(item, "module", None), "run_playbook", None) is run_playbook


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules that run Ansible plays on localhost (tests/localplay.py) go first.

    Their module fixtures take seconds to tens of seconds, and make test's
    pytest-xdist (--dist loadfile) hands out whole files in collection order: the
    slowest two, alphabetically among the last, then ran alone on one worker while
    the other had nothing left. The order within each group is kept.
    """
    items.sort(key=lambda item: not runs_a_play(item))
