"""The artifact lock: every file a build downloads, pinned by version and sha256.

The lock lives in playbooks/group_vars/all/versions.yml (`efa_image_artifacts`),
so Ansible and this package read the same data. An overlay file may replace
fields of existing entries (`efa_image_artifacts_overlay`), as the CI mirror's
lock does; it may not invent components.

An entry of `kind: wheelset` is a requirement resolved with its whole dependency
closure (PyTorch and its nvidia-* CUDA wheels): `wheels` lists every file with
its URLs and sha256, and parsing turns each into an Artifact of its own, named
`<set>/<project>` (so the cache, the mirror, the pre-flight and the artifact role
handle every file as they handle any wheel); naming the set selects them all.
`efa-image lock update <set>` writes the list (efa_image.artifacts.wheelset).
"""

from __future__ import annotations

import json
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
WHEELSET = "wheelset"
WHEELSET_REQUIRED = ("version", "role", "wheels")
# resolve: the inputs of `efa-image lock update`; excluded: what it left out, with
# the version the resolution would have installed.
# sdists: files of the set that the installing role builds from source in the
# image (resolve.sdists names their projects), kind "sdist", fields as wheels'.
WHEELSET_OPTIONAL = ("methods", "kind", "description", "resolve", "excluded", "sdists")
WHEEL_FIELDS = ("filename", "urls", "sha256")
# name-version[-build]-python-abi-platform.whl (PEP 427).
WHEEL_FILENAME = re.compile(
    r"^(?P<project>[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?)-(?P<version>[^-]+)"
    r"(?:-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$"
)
# name-version.tar.gz (PEP 625).
SDIST_FILENAME = re.compile(
    r"^(?P<project>[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?)-(?P<version>[^-]+)\.tar\.gz$"
)
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
    # The wheel set this file belongs to ("" for an entry of its own), and its version.
    wheelset: str = ""
    wheelset_version: str = ""
    # The set's `excluded`: (project, version) that the resolution left out, e.g.
    # ("nvidia-nccl-cu12", "2.21.5"), the NCCL PyTorch pins and was built with.
    wheelset_excluded: tuple[tuple[str, str], ...] = field(default=(), compare=False)

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


def canonical_project(name: str) -> str:
    """PEP 503's normalised name: 'Jinja2' -> 'jinja2', 'nvidia_nccl_cu12' -> 'nvidia-nccl-cu12'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_wheel_filename(filename: str, where: str) -> tuple[str, str]:
    """(normalised project, version) of a wheel file name; LockError when it is none."""
    match = WHEEL_FILENAME.match(filename)
    if match is None:
        raise LockError(
            f"{where}: {filename!r} is not a wheel file name (name-version-...-platform.whl)"
        )
    return canonical_project(match.group("project")), match.group("version")


def parse_sdist_filename(filename: str, where: str) -> tuple[str, str]:
    """(normalised project, version) of a source distribution's file name."""
    match = SDIST_FILENAME.match(filename)
    if match is None:
        raise LockError(f"{where}: {filename!r} is not a source distribution (name-version.tar.gz)")
    return canonical_project(match.group("project")), match.group("version")


def _urls(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list) or not value:
        raise LockError(f"{where}.urls: expected a list of URLs")
    for url in value:
        if not str(url).startswith(URL_SCHEMES):
            raise LockError(f"{where}.urls: {url!r} is not an http(s) or file URL")
    return tuple(str(url) for url in value)


def parse_wheelset(name: str, entry: Mapping[str, Any], where: str) -> list[Artifact]:
    """One Artifact (kind wheel) per file of the set, named `<set>/<project>`."""
    unknown = sorted(set(entry) - set(WHEELSET_REQUIRED) - set(WHEELSET_OPTIONAL))
    if unknown:
        allowed = ", ".join(WHEELSET_REQUIRED + WHEELSET_OPTIONAL)
        raise LockError(f"{where}: unknown field(s) {', '.join(unknown)} (allowed: {allowed})")
    missing = [key for key in WHEELSET_REQUIRED[:2] if not entry.get(key)]
    if missing:
        raise LockError(f"{where}: missing {', '.join(missing)}")
    wheels = entry.get("wheels")
    if not isinstance(wheels, list) or not wheels:
        raise LockError(f"{where}.wheels: no wheels resolved: run `efa-image lock update {name}`")
    methods = entry.get("methods") or []
    if not isinstance(methods, list):
        raise LockError(f"{where}.methods: expected a list of role methods")
    excluded = _excluded(entry.get("excluded"), f"{where}.excluded")
    sdists = entry.get("sdists") or []
    if not isinstance(sdists, list):
        raise LockError(f"{where}.sdists: expected a list of files (filename, urls, sha256)")
    members: dict[str, Artifact] = {}
    files = [("wheels", "wheel", i, w) for i, w in enumerate(wheels)]
    files += [("sdists", "sdist", i, w) for i, w in enumerate(sdists)]
    for key, kind, index, wheel in files:
        at = f"{where}.{key}[{index}]"
        if not isinstance(wheel, Mapping) or sorted(wheel) != sorted(WHEEL_FIELDS):
            raise LockError(f"{at}: expected exactly the fields {', '.join(WHEEL_FIELDS)}")
        filename = _text(wheel["filename"])
        parse_name = parse_wheel_filename if kind == "wheel" else parse_sdist_filename
        project, version = parse_name(filename, at)
        sha256 = _text(wheel["sha256"]).lower()
        if not SHA256.match(sha256):
            raise LockError(f"{at}.sha256: {wheel['sha256']!r} is not 64 hexadecimal digits")
        member = f"{name}/{project}"
        if member in members:
            raise LockError(f"{at}: {project} is listed twice")
        members[member] = Artifact(
            name=member,
            version=version,
            role=_text(entry["role"]),
            filename=filename,
            urls=_urls(wheel["urls"], at),
            sha256=sha256,
            methods=tuple(str(m) for m in methods),
            kind=kind,
            description=f"{project} {version}, of the wheel set {name} {_text(entry['version'])}",
            origin=at,
            wheelset=name,
            wheelset_version=_text(entry["version"]),
            wheelset_excluded=excluded,
        )
    return list(members.values())


def _excluded(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    """A wheel set's `excluded` mapping (project -> version) as sorted pairs."""
    if value is None:
        return ()
    if not isinstance(value, Mapping) or not all(_text(v) for v in value.values()):
        raise LockError(
            f"{where}: expected a mapping of project to version, as `efa-image lock update` "
            'writes it (e.g. nvidia-nccl-cu12: "2.21.5")'
        )
    return tuple(sorted((canonical_project(str(k)), _text(v)) for k, v in value.items()))


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
        return expand(self.artifacts, names, str(self.path))


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
    parsed: dict[str, Artifact] = {}
    for name, entry in merged.items():
        where = f"{source}: {LOCK_KEY}.{name}"
        if isinstance(entry, Mapping) and _text(entry.get("kind")) == WHEELSET:
            parsed.update((member.name, member) for member in parse_wheelset(name, entry, where))
        else:
            parsed[name] = parse_entry(name, entry, where)
    return parsed


def load(path: Path | None = None, overlays: Iterable[Path] = ()) -> Lock:
    path = path or default_lock_path()
    return Lock(parse_entries(_load_yaml(path).get(LOCK_KEY), overlays, str(path)), path)


def env_overlays() -> list[Path]:
    """The overlay files EFA_IMAGE_LOCK_OVERLAY names (colon-separated), as Ansible sees them."""
    return [Path(p) for p in os.environ.get("EFA_IMAGE_LOCK_OVERLAY", "").split(":") if p]


def field_span(lines: list[str], name: str, key: str) -> tuple[int, int, int] | None:
    """Where the field `key` of the lock entry `name` lies in the lock's lines.

    (first, end, indent): the field's own line, one past the last line it nests
    (deeper lines, and a block list's items at its own indentation), and its
    indentation. Blank lines and comments that end it belong to what follows.
    Only the entry's own fields count (not a nested field of the same name, nor
    an entry of the same name outside the lock's mapping). None when the entry
    or its field is missing.
    """
    in_lock = False
    entry_indent: int | None = None
    field_indent = 0
    entry = re.compile(rf"^{re.escape(name)}:\s*(#.*)?$")
    for index, line in enumerate(lines):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if not stripped or stripped.startswith("#"):
            continue
        if indent == 0:
            if entry_indent is not None:
                return None
            in_lock = re.match(rf"^{LOCK_KEY}:\s*(#.*)?$", stripped) is not None
            continue
        if not in_lock:
            continue
        if entry_indent is None:
            if entry.match(stripped):
                entry_indent = indent
            continue
        if indent <= entry_indent:
            return None
        field_indent = field_indent or indent
        if indent != field_indent or not stripped.startswith(f"{key}:"):
            continue
        end = index + 1
        while end < len(lines):
            following = lines[end]
            depth = len(following) - len(following.lstrip())
            content = following.strip()
            nested = depth > indent or (depth == indent and content.startswith("- "))
            if content and not nested:
                break
            end += 1
        while end > index + 1 and (
            not lines[end - 1].strip() or lines[end - 1].strip().startswith("#")
        ):
            end -= 1
        return index, end, indent
    return None


def set_sha256(text: str, name: str, sha256: str) -> str:
    """Rewrite one entry's sha256 line in the lock's text, keeping comments and layout."""
    return set_field(text, name, "sha256", sha256)


def set_field(text: str, name: str, key: str, value: Any) -> str:
    """Rewrite one field of an entry (a scalar, list or mapping, with whatever it nests) in
    the lock's text, keeping everything else, comments included; `value` is written as
    block YAML at the field's indentation."""
    lines = text.splitlines(keepends=True)
    span = field_span(lines, name, key)
    if span is None:
        if isinstance(value, Mapping | list):
            empty = "{}" if isinstance(value, Mapping) else "[]"
            raise LockError(
                f"{LOCK_KEY}.{name}: no `{key}:` field to update (add `{key}: {empty}`)"
            )
        raise LockError(f'{LOCK_KEY}.{name}: no `{key}:` line to update (add `{key}: ""`)')
    first, end, indent = span
    lines[first:end] = [row + "\n" for row in _render_block(key, value, indent)]
    return "".join(lines)


def _render_block(key: str, value: Any, indent: int) -> list[str]:
    """`key: value` as block YAML the way the lock is written: strings double-quoted
    (JSON's quoting is YAML's), list items indented under their key."""
    pad = " " * indent
    if isinstance(value, Mapping):
        if not value:
            return [f"{pad}{key}: {{}}"]
        rows = [f"{pad}{key}:"]
        for sub, item in value.items():
            rows += _render_block(str(sub), item, indent + 2)
        return rows
    if isinstance(value, list):
        if not value:
            return [f"{pad}{key}: []"]
        rows = [f"{pad}{key}:"]
        for item in value:
            if isinstance(item, Mapping) and item:
                inner = [
                    row for sub, v in item.items() for row in _render_block(str(sub), v, indent + 4)
                ]
                rows.append(f"{pad}  - {inner[0].lstrip()}")
                rows += inner[1:]
            else:
                rows.append(f"{pad}  - {json.dumps(item)}")
        return rows
    return [f"{pad}{key}: {json.dumps(value)}"]
