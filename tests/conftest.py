from pathlib import Path

import pytest

from localplay import run_playbook

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture
def base_probed(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """`efa-image build`'s base image steps without docker: the base is present and
    holds nothing of the flavor, CUDA 12.4 in /usr/local/cuda. Returns the refs
    that the base image step was asked to make present."""
    from efa_image.building import base, basecontents, distro, images

    ensured: list[str] = []
    monkeypatch.setattr(
        base, "ensure_ref", lambda ref, store=None: ensured.append(ref) or f"{ref}: present"
    )
    monkeypatch.setattr(images, "image_id", lambda ref: "sha256:" + "b" * 64)
    monkeypatch.setattr(images, "remove_stale_build_containers", lambda: [])
    monkeypatch.setattr(
        images, "probe_cuda", lambda ref: images.BaseCuda("/usr/local/cuda", "12.4")
    )
    monkeypatch.setattr(images, "base_path", lambda ref: "/usr/bin:/bin")
    monkeypatch.setattr(distro, "probe_for", lambda ref, methods: None)
    monkeypatch.setattr(basecontents, "probe", lambda ref: {})
    return ensured


def runs_a_play(item: pytest.Item) -> bool:
    return getattr(getattr(item, "module", None), "run_playbook", None) is run_playbook


def waits_for_a_core(item: pytest.Item) -> bool:
    """Its plays have no deadline: a module sets PLAYS_HAVE_A_DEADLINE when they do."""
    module = getattr(item, "module", None)
    return runs_a_play(item) and not getattr(module, "PLAYS_HAVE_A_DEADLINE", False)


# First, so that -m sees the marker.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules that run Ansible plays on localhost (tests/localplay.py) go first,
    and those whose plays may wait for a core are marked `plays` (`pytest -m plays`
    runs just them).

    Their module fixtures take seconds to tens of seconds, and make test's
    pytest-xdist (--dist loadfile) hands out whole files in collection order: the
    slowest two, alphabetically among the last, then ran alone on one worker while
    the other had nothing left. The order within each group is kept.
    """
    for item in items:
        if waits_for_a_core(item):
            item.add_marker(pytest.mark.plays)
    items.sort(key=lambda item: not runs_a_play(item))
