"""The artifact lock: every file a build downloads, pinned by version and sha256.

The lock lives in playbooks/group_vars/all/versions.yml (`efa_image_artifacts`),
so Ansible and this package read the same data. An overlay file may replace
fields of existing entries (`efa_image_artifacts_overlay`), as the CI mirror's
lock does; it may not invent components.

This module loads the lock, applies overlays and selects entries; what an entry
must hold is efa_image.artifacts.lock_schema's, and `efa-image lock update`
rewrites the file through efa_image.artifacts.lock_edit. The model (Artifact,
LockError, the keys) is lock_model's, named here too for the lock's users.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from efa_image.artifacts.lock_model import (
    DIGEST_KINDS,
    LOCK_KEY,
    OVERLAY_KEY,
    WHEELSET,
    Artifact,
    LockError,
)
from efa_image.artifacts.lock_schema import parse_entry, parse_wheelset
from efa_image.paths import project_root

__all__ = [
    "LOCK_KEY",
    "OVERLAY_KEY",
    "WHEELSET",
    "Artifact",
    "Lock",
    "LockError",
    "default_lock_path",
    "env_overlays",
    "expand",
    "load",
    "merge_overlay",
    "parse_entries",
    "read_overlay",
]


@dataclass(frozen=True)
class Lock:
    artifacts: dict[str, Artifact]
    path: Path

    def get(self, name: str) -> Artifact:
        try:
            return self.artifacts[name]
        except KeyError:
            known = ", ".join(sorted(self.artifacts))
            raise LockError(f"{self.path}: unknown component {name!r} (known: {known})") from None

    def select(self, names: Iterable[str]) -> list[Artifact]:
        return expand(self.artifacts, names, str(self.path))


def default_lock_path() -> Path:
    return project_root() / "playbooks" / "group_vars" / "all" / "versions.yml"


def env_overlays() -> list[Path]:
    """The overlay files EFA_IMAGE_LOCK_OVERLAY names (colon-separated), as Ansible sees them."""
    return [Path(p) for p in os.environ.get("EFA_IMAGE_LOCK_OVERLAY", "").split(":") if p]


def _load_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError as exc:
        raise LockError(f"{path}: no such lock file") from exc
    except yaml.YAMLError as exc:
        raise LockError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise LockError(f"{path}: expected a mapping at the top")
    return data


def read_overlay(path: Path) -> Mapping[str, Any]:
    overlay = _load_yaml(path).get(OVERLAY_KEY)
    if not isinstance(overlay, Mapping):
        raise LockError(f"{path}: {OVERLAY_KEY} must be a mapping")
    return overlay


def merge_overlay(
    entries: Mapping[str, Any], overlay: Mapping[str, Any], where: str
) -> dict[str, Any]:
    """Overlay fields replace the entry's fields; unknown components are refused.

    An overlay's pin replaces the entry's whichever kind either is: its sha256
    replaces an entry's sha512 (Debian's Sources index gives sha256), and back.
    """
    merged = dict(entries)
    for name, fields in overlay.items():
        if name not in entries:
            known = ", ".join(sorted(entries))
            raise LockError(f"{where}.{name}: unknown component (known: {known})")
        if not isinstance(fields, Mapping):
            raise LockError(f"{where}.{name}: expected a mapping of fields to replace")
        base = dict(entries[name])
        if any(kind in fields for kind in DIGEST_KINDS):
            for kind in DIGEST_KINDS:
                base.pop(kind, None)
        merged[name] = {**base, **fields}
    return merged


def parse_entries(entries: Any, overlays: Iterable[Path], source: str) -> dict[str, Artifact]:
    """Validate the lock's entries after applying the overlay files in order."""
    if not isinstance(entries, Mapping) or not entries:
        raise LockError(f"{source}: {LOCK_KEY} must be a non-empty mapping")
    merged: dict[str, Any] = dict(entries)
    for overlay_path in overlays:
        where = f"{overlay_path}: {OVERLAY_KEY}"
        merged = merge_overlay(merged, read_overlay(overlay_path), where)
    parsed: dict[str, Artifact] = {}
    for name, entry in merged.items():
        where = f"{source}: {LOCK_KEY}.{name}"
        if isinstance(entry, Mapping) and str(entry.get("kind") or "").strip() == WHEELSET:
            parsed.update((member.name, member) for member in parse_wheelset(name, entry, where))
        else:
            parsed[name] = parse_entry(name, entry, where)
    return parsed


def load(path: Path | None = None, overlays: Iterable[Path] = ()) -> Lock:
    path = path or default_lock_path()
    return Lock(parse_entries(_load_yaml(path).get(LOCK_KEY), overlays, str(path)), path)


def expand(artifacts: Mapping[str, Artifact], names: Iterable[str], where: str) -> list[Artifact]:
    """The named entries in order; a wheel set's name stands for every file of the set."""
    selected: list[Artifact] = []
    for name in names:
        found = [artifacts[name]] if name in artifacts else []
        found = found or [a for a in artifacts.values() if a.wheelset == name]
        if not found:
            known = sorted({a.wheelset or a.name for a in artifacts.values()})
            raise LockError(f"{where}: unknown component {name!r} (known: {', '.join(known)})")
        selected.extend(a for a in found if a not in selected)
    return selected
