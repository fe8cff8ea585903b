"""The artifact lock: every file a build downloads, pinned by version and sha256.

The lock lives in playbooks/group_vars/all/versions.yml (`efa_image_artifacts`),
so Ansible and this package read the same data. An overlay file may replace
fields of existing entries (`efa_image_artifacts_overlay`), as the CI mirror's
lock does; it may not invent components.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from efa_image.errors import EfaImageError
from efa_image.paths import project_root

LOCK_KEY = "efa_image_artifacts"
OVERLAY_KEY = "efa_image_artifacts_overlay"
SHA256 = re.compile(r"^[0-9a-f]{64}$")
REQUIRED = ("version", "role", "filename", "urls")
OPTIONAL = ("sha256", "methods", "kind", "description")
KINDS = ("file", "wheel")
URL_SCHEMES = ("https://", "http://", "file://")


class LockError(EfaImageError):
    """A malformed lock or overlay: the message names the file and the key."""


@dataclass(frozen=True)
class Artifact:
    name: str
    version: str
    role: str
    filename: str
    urls: tuple[str, ...]
    sha256: str | None
    methods: tuple[str, ...] = ()
    kind: str = "file"
    description: str = ""
    origin: str = field(default="", compare=False)

    @property
    def pinned(self) -> bool:
        return self.sha256 is not None

    def mirror_path(self) -> str:
        """Where the artifact lies in a mirror, relative to its root."""
        return f"{self.name}/{self.version}/{self.filename}"

    def used_with(self, method: str | None) -> bool:
        """Whether its role, using method, needs this artifact (no methods listed: any)."""
        return not self.methods or method in self.methods


def default_lock_path() -> Path:
    return project_root() / "playbooks" / "group_vars" / "all" / "versions.yml"


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


def _text(value: Any) -> str:
    return str(value).strip() if value is not None else ""


def parse_entry(name: str, entry: Any, where: str) -> Artifact:
    """Validate one entry; `where` is 'FILE: KEY.NAME' for messages."""
    if not isinstance(entry, Mapping):
        raise LockError(f"{where}: expected a mapping of {', '.join(REQUIRED)}")
    unknown = sorted(set(entry) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        allowed = ", ".join(REQUIRED + OPTIONAL)
        raise LockError(f"{where}: unknown field(s) {', '.join(unknown)} (allowed: {allowed})")
    missing = [key for key in REQUIRED if not entry.get(key)]
    if missing:
        raise LockError(f"{where}: missing {', '.join(missing)}")
    version = _text(entry["version"])
    urls = entry["urls"]
    if isinstance(urls, str) or not isinstance(urls, list):
        raise LockError(f"{where}.urls: expected a list of URLs")
    expanded = tuple(str(url).format(version=version) for url in urls)
    for url in expanded:
        if not url.startswith(URL_SCHEMES):
            raise LockError(f"{where}.urls: {url!r} is not an http(s) or file URL")
    sha256 = _text(entry.get("sha256")).lower() or None
    if sha256 is not None and not SHA256.match(sha256):
        raise LockError(f"{where}.sha256: {entry.get('sha256')!r} is not 64 hexadecimal digits")
    kind = _text(entry.get("kind")) or "file"
    if kind not in KINDS:
        raise LockError(f"{where}.kind: {kind!r} is not one of {', '.join(KINDS)}")
    methods = entry.get("methods") or []
    if not isinstance(methods, list):
        raise LockError(f"{where}.methods: expected a list of role methods")
    return Artifact(
        name=name,
        version=version,
        role=_text(entry["role"]),
        filename=_text(entry["filename"]).format(version=version),
        urls=expanded,
        sha256=sha256,
        methods=tuple(str(m) for m in methods),
        kind=kind,
        description=_text(entry.get("description")),
        origin=where,
    )


def merge_overlay(
    entries: Mapping[str, Any], overlay: Mapping[str, Any], where: str
) -> dict[str, Any]:
    """Overlay fields replace the entry's fields; unknown components are refused."""
    merged = dict(entries)
    for name, fields in overlay.items():
        if name not in entries:
            known = ", ".join(sorted(entries))
            raise LockError(f"{where}.{name}: unknown component (known: {known})")
        if not isinstance(fields, Mapping):
            raise LockError(f"{where}.{name}: expected a mapping of fields to replace")
        merged[name] = {**entries[name], **fields}
    return merged


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
        return [self.get(name) for name in names]


def read_overlay(path: Path) -> Mapping[str, Any]:
    overlay = _load_yaml(path).get(OVERLAY_KEY)
    if not isinstance(overlay, Mapping):
        raise LockError(f"{path}: {OVERLAY_KEY} must be a mapping")
    return overlay


def parse_entries(entries: Any, overlays: Iterable[Path], source: str) -> dict[str, Artifact]:
    """Validate the lock's entries after applying the overlay files in order."""
    if not isinstance(entries, Mapping) or not entries:
        raise LockError(f"{source}: {LOCK_KEY} must be a non-empty mapping")
    merged: dict[str, Any] = dict(entries)
    for overlay_path in overlays:
        where = f"{overlay_path}: {OVERLAY_KEY}"
        merged = merge_overlay(merged, read_overlay(overlay_path), where)
    return {
        name: parse_entry(name, entry, f"{source}: {LOCK_KEY}.{name}")
        for name, entry in merged.items()
    }


def load(path: Path | None = None, overlays: Iterable[Path] = ()) -> Lock:
    path = path or default_lock_path()
    return Lock(parse_entries(_load_yaml(path).get(LOCK_KEY), overlays, str(path)), path)


def env_overlays() -> list[Path]:
    """The overlay files EFA_IMAGE_LOCK_OVERLAY names (colon-separated), as Ansible sees them."""
    return [Path(p) for p in os.environ.get("EFA_IMAGE_LOCK_OVERLAY", "").split(":") if p]


def set_sha256(text: str, name: str, sha256: str) -> str:
    """Rewrite one entry's sha256 line in the lock's text, keeping comments and layout."""
    lines = text.splitlines(keepends=True)
    in_lock = False
    entry_indent: int | None = None
    for index, line in enumerate(lines):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if not stripped or stripped.startswith("#"):
            continue
        if indent == 0:
            in_lock = stripped == f"{LOCK_KEY}:"
            entry_indent = None
            continue
        if not in_lock:
            continue
        if stripped == f"{name}:":
            entry_indent = indent
            continue
        if entry_indent is not None:
            if indent <= entry_indent:
                break
            if stripped.startswith("sha256:"):
                lines[index] = f'{line[:indent]}sha256: "{sha256}"\n'
                return "".join(lines)
    raise LockError(f'{LOCK_KEY}.{name}: no `sha256:` line to update (add `sha256: ""`)')
