"""Where the project, its virtualenv and its state live."""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """The checkout this package runs from (editable install), else the cwd."""
    if env := os.environ.get("EFA_IMAGE_ROOT"):
        return Path(env)
    candidate = Path(__file__).resolve().parents[2]
    if (candidate / "pyproject.toml").is_file() and (candidate / "roles").is_dir():
        return candidate
    return Path.cwd()


def default_cache_dir() -> Path:
    """Artifacts, base image locks, the build cache and the verified-image records."""
    if env := os.environ.get("EFA_IMAGE_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "efa-image"


def venv_dir() -> Path:
    return Path(os.environ.get("EFA_IMAGE_VENV", project_root() / ".venv"))


def state_dir() -> Path:
    """Logs of services started by set-up (dockerd)."""
    return Path(os.environ.get("EFA_IMAGE_STATE_DIR", "/var/log/efa-image"))
