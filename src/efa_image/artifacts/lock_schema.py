"""What a lock entry must hold, and the Artifacts it stands for.

A plain entry is one file (parse_entry). An entry of `kind: wheelset` is a
requirement resolved with its whole dependency closure (PyTorch and its nvidia-*
CUDA wheels): `wheels` lists every file with its URLs and sha256, and parsing
turns each into an Artifact of its own, named `<set>/<project>` (so the cache,
the mirror, the pre-flight and the artifact role handle every file as they
handle any wheel); naming the set selects them all (efa_image.artifacts.lock).
File names are read with packaging.utils, pip's own reading of them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)

from efa_image.artifacts.lock_model import DIGEST_KINDS, Artifact, LockError

SHA256 = re.compile(r"^[0-9a-f]{64}$")
SHA512 = re.compile(r"^[0-9a-f]{128}$")
DIGEST_PATTERNS = {"sha256": SHA256, "sha512": SHA512}
DIGEST_DIGITS = {"sha256": 64, "sha512": 128}
REQUIRED = ("version", "role", "filename", "urls")
# The pin is `sha256:` or, where the publisher gives only that, `sha512:` (one of them).
OPTIONAL = ("sha256", "sha512", "methods", "kind", "description")
KINDS = ("file", "wheel")
WHEELSET_REQUIRED = ("version", "role", "wheels")
# resolve: the inputs of `efa-image lock update`; excluded: what it left out, with
# the version the resolution would have installed.
# sdists: files of the set that the installing role builds from source in the
# image (resolve.sdists names their projects), kind "sdist", fields as wheels'.
WHEELSET_OPTIONAL = ("methods", "kind", "description", "resolve", "excluded", "sdists")
WHEEL_FIELDS = ("filename", "urls", "sha256")
# A wheel set's file may give sha512 in place of sha256 (pip's --hash takes either).
WHEEL_FIELD_SETS = (sorted(WHEEL_FIELDS), sorted(("filename", "urls", "sha512")))
URL_SCHEMES = ("https://", "http://", "file://")


def _text(value: Any) -> str:
    return str(value).strip() if value is not None else ""


def wheel_name_version(filename: str, where: str) -> tuple[str, str]:
    """(normalised project, version) of a wheel's file name (PEP 427); LockError if none."""
    try:
        project, version, _, _ = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        raise LockError(
            f"{where}: {filename!r} is not a wheel file name (name-version-...-platform.whl)"
        ) from None
    return project, str(version)


def sdist_name_version(filename: str, where: str) -> tuple[str, str]:
    """(normalised project, version) of a source distribution's file name.

    Only PEP 625's name-version.tar.gz: packaging also takes the legacy .zip,
    which the roles that build sdists in the image do not unpack.
    """
    try:
        if not filename.endswith(".tar.gz"):
            raise InvalidSdistFilename(filename)
        project, version = parse_sdist_filename(filename)
    except InvalidSdistFilename:
        raise LockError(
            f"{where}: {filename!r} is not a source distribution (name-version.tar.gz)"
        ) from None
    return project, str(version)


def _urls(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list) or not value:
        raise LockError(f"{where}.urls: expected a list of URLs")
    for url in value:
        if not str(url).startswith(URL_SCHEMES):
            raise LockError(f"{where}.urls: {url!r} is not an http(s) or file URL")
    return tuple(str(url) for url in value)


def _sha256(value: Any, where: str) -> str:
    return _hex_digest("sha256", value, where)


def _hex_digest(kind: str, value: Any, where: str) -> str:
    digest = _text(value).lower()
    if not DIGEST_PATTERNS[kind].match(digest):
        digits = DIGEST_DIGITS[kind]
        raise LockError(f"{where}.{kind}: {value!r} is not {digits} hexadecimal digits")
    return digest


def digest_of_entry(entry: Mapping[str, Any], where: str) -> tuple[str, str | None]:
    """(kind, digest or None when empty) of an entry's pin: exactly one of sha256/sha512."""
    given = [kind for kind in DIGEST_KINDS if kind in entry]
    if len(given) > 1:
        raise LockError(
            f"{where}: both sha256 and sha512 given: pin the file by exactly one "
            "(sha512 only where the publisher gives no sha256)"
        )
    kind = given[0] if given else "sha256"
    value = entry.get(kind)
    return kind, _hex_digest(kind, value, where) if _text(value) else None


def _methods(entry: Mapping[str, Any], where: str) -> tuple[str, ...]:
    methods = entry.get("methods") or []
    if not isinstance(methods, list):
        raise LockError(f"{where}.methods: expected a list of role methods")
    return tuple(str(m) for m in methods)


def _check_fields(
    entry: Mapping[str, Any], required: tuple[str, ...], optional: tuple[str, ...], where: str
) -> None:
    unknown = sorted(set(entry) - set(required) - set(optional))
    if unknown:
        allowed = ", ".join(required + optional)
        raise LockError(f"{where}: unknown field(s) {', '.join(unknown)} (allowed: {allowed})")


def parse_entry(name: str, entry: Any, where: str) -> Artifact:
    """Validate one entry; `where` is 'FILE: KEY.NAME' for messages."""
    if not isinstance(entry, Mapping):
        raise LockError(f"{where}: expected a mapping of {', '.join(REQUIRED)}")
    _check_fields(entry, REQUIRED, OPTIONAL, where)
    missing = [key for key in REQUIRED if not entry.get(key)]
    if missing:
        raise LockError(f"{where}: missing {', '.join(missing)}")
    version = _text(entry["version"])
    urls = entry["urls"]
    if isinstance(urls, list):
        urls = [str(url).format(version=version) for url in urls]
    kind = _text(entry.get("kind")) or "file"
    if kind not in KINDS:
        raise LockError(f"{where}.kind: {kind!r} is not one of {', '.join(KINDS)}")
    digest_kind, digest = digest_of_entry(entry, where)
    return Artifact(
        name=name,
        version=version,
        role=_text(entry["role"]),
        filename=_text(entry["filename"]).format(version=version),
        urls=_urls(urls, where),
        sha256=digest if digest_kind == "sha256" else None,
        sha512=digest if digest_kind == "sha512" else None,
        digest_kind=digest_kind,
        methods=_methods(entry, where),
        kind=kind,
        description=_text(entry.get("description")),
        origin=where,
    )


def parse_wheelset(name: str, entry: Mapping[str, Any], where: str) -> list[Artifact]:
    """One Artifact (kind wheel, or sdist) per file of the set, named `<set>/<project>`."""
    _check_fields(entry, WHEELSET_REQUIRED, WHEELSET_OPTIONAL, where)
    missing = [key for key in WHEELSET_REQUIRED[:2] if not entry.get(key)]
    if missing:
        raise LockError(f"{where}: missing {', '.join(missing)}")
    wheels = entry.get("wheels")
    if not isinstance(wheels, list) or not wheels:
        raise LockError(f"{where}.wheels: no wheels resolved: run `efa-image lock update {name}`")
    methods = _methods(entry, where)
    excluded = _excluded(entry.get("excluded"), f"{where}.excluded")
    sdists = entry.get("sdists") or []
    if not isinstance(sdists, list):
        raise LockError(f"{where}.sdists: expected a list of files (filename, urls, sha256)")
    set_version = _text(entry["version"])
    members: dict[str, Artifact] = {}
    files = [("wheels", "wheel", i, w) for i, w in enumerate(wheels)]
    files += [("sdists", "sdist", i, w) for i, w in enumerate(sdists)]
    for key, kind, index, wheel in files:
        at = f"{where}.{key}[{index}]"
        if not isinstance(wheel, Mapping) or sorted(wheel) not in WHEEL_FIELD_SETS:
            raise LockError(
                f"{at}: expected exactly the fields {', '.join(WHEEL_FIELDS)} "
                "(or sha512 in place of sha256)"
            )
        filename = _text(wheel["filename"])
        name_version = wheel_name_version if kind == "wheel" else sdist_name_version
        project, version = name_version(filename, at)
        digest_kind = "sha512" if "sha512" in wheel else "sha256"
        digest = _hex_digest(digest_kind, wheel[digest_kind], at)
        member = f"{name}/{project}"
        if member in members:
            raise LockError(f"{at}: {project} is listed twice")
        members[member] = Artifact(
            name=member,
            version=version,
            role=_text(entry["role"]),
            filename=filename,
            urls=_urls(wheel["urls"], at),
            sha256=digest if digest_kind == "sha256" else None,
            sha512=digest if digest_kind == "sha512" else None,
            digest_kind=digest_kind,
            methods=methods,
            kind=kind,
            description=f"{project} {version}, of the wheel set {name} {set_version}",
            origin=at,
            wheelset=name,
            wheelset_version=set_version,
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
    return tuple(sorted((canonicalize_name(str(k)), _text(v)) for k, v in value.items()))
