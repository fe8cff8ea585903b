"""`efa-image lock update NAME` for a wheel set: resolve once, pin every file.

An entry of `kind: wheelset` (efa_image.artifacts.lock_schema) names requirements
(`torch=={version}`) and the target they are for (`resolve:` python, platform,
index, exclude). Here pip's own resolver computes the whole dependency closure
on the controller (`pip install --dry-run --report`, binary wheels only, for the
target's Python version, CPython ABI and platform), against that index alone:
pip's configuration files and the environment's find-links and extra indexes are
switched off, so every pin is the index's own file at the index's own URL, not a
local copy. The sha256 of each file is the index's (the report's archive_info);
every file is then downloaded into the verified cache
(efa_image.artifacts.artifact_store), which refuses one that does not match. The
entry's `wheels` and `excluded` fields are rewritten in place
(efa_image.artifacts.lock_edit); the rest of the lock, comments included, is kept.

pip evaluates environment markers (`python_version`, `platform_machine`) with the
interpreter it runs in, whatever --python-version says, so a resolution for
another Python or machine than the controller's would pick the wrong set: it is
refused, naming the fix.

Projects named in `resolve.sdists` are taken as source distributions (PyPI ships
no wheel of them, or the image must compile them against its own libraries): pip
resolves them first, one at a time without their dependencies (it refuses
sdists together with a foreign --platform), their own requirements join the
binary resolution, and their files go into the entry's `sdists` field. The role
that installs the set builds them in the image from those verified files.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from efa_image.artifacts import lock_edit, lock_schema
from efa_image.artifacts.artifact_store import Store
from efa_image.artifacts.lock_model import LOCK_KEY, WHEELSET, LockError
from efa_image.errors import EfaImageError
from efa_image.runner import run_command

DEFAULT_INDEX = "https://pypi.org/simple"
MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_(\w+)$")
# PEP 600's names for the older PEP 513/571/599 tags.
LEGACY_MANYLINUX = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}
# Where pip's configuration could add sources other than the entry's index. Empty
# values are ignored by pip, which is how the environment's are switched off.
PIP_SOURCE_VARIABLES = ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL", "PIP_NO_INDEX")


class ResolveError(EfaImageError):
    """The set cannot be resolved as the lock asks; the message names the fix."""


@dataclass(frozen=True)
class Spec:
    """What a wheel set is resolved for: the `resolve:` field of its lock entry."""

    name: str
    version: str
    requirements: tuple[str, ...]
    python: str  # "3.11"
    platform: str  # the oldest platform the image may run on, e.g. manylinux_2_28_x86_64
    index: str = DEFAULT_INDEX
    exclude: tuple[str, ...] = ()
    # Projects taken as source distributions (normalised names).
    sdists: tuple[str, ...] = ()

    @property
    def abi(self) -> str:
        return "cp" + self.python.replace(".", "")

    @property
    def machine(self) -> str:
        match = MANYLINUX.match(self.platform)
        return match.group(3) if match else self.platform.split("_", 1)[-1]


@dataclass(frozen=True)
class Resolution:
    wheels: list[dict[str, Any]]  # filename, urls, sha256: the entry's `wheels`
    excluded: dict[str, str]  # project -> the version the resolution would have installed
    sdists: list[dict[str, Any]] = field(default_factory=list)  # the entry's `sdists`


@dataclass(frozen=True)
class Update:
    name: str
    version: str
    count: int
    diff: str  # "" when the lock already held this resolution


def read_spec(lock_path: Path, name: str) -> Spec | None:
    """The entry's resolution inputs; None when NAME is not a wheel set."""
    entries = (yaml.safe_load(lock_path.read_text()) or {}).get(LOCK_KEY) or {}
    entry = entries.get(name)
    if not isinstance(entry, Mapping) or entry.get("kind") != WHEELSET:
        return None
    where = f"{lock_path}: {LOCK_KEY}.{name}.resolve"
    resolve = entry.get("resolve")
    if not isinstance(resolve, Mapping):
        raise ResolveError(f"{where}: missing (requirements, python, platform)")
    missing = [key for key in ("requirements", "python", "platform") if not resolve.get(key)]
    if missing:
        raise ResolveError(f"{where}: missing {', '.join(missing)}")
    version = str(entry.get("version", "")).strip()
    if not isinstance(resolve["requirements"], list):
        raise ResolveError(f"{where}.requirements: expected a list such as ['torch=={{version}}']")
    python = str(resolve["python"])
    if not re.match(r"^3\.\d+$", python):
        raise ResolveError(f"{where}.python: {python!r} is not a Python version such as '3.11'")
    return Spec(
        name=name,
        version=version,
        requirements=tuple(str(r).format(version=version) for r in resolve["requirements"]),
        python=python,
        platform=str(resolve["platform"]),
        index=str(resolve.get("index") or DEFAULT_INDEX),
        exclude=tuple(canonicalize_name(str(p)) for p in resolve.get("exclude") or []),
        sdists=tuple(canonicalize_name(str(p)) for p in resolve.get("sdists") or []),
    )


def platforms(floor: str) -> list[str]:
    """Every platform tag a target of `floor` accepts, newest first: pip does not widen
    `--platform manylinux_2_28_x86_64` to the older manylinux tags (PyTorch 2.5.1 is
    manylinux1, NVIDIA's wheels manylinux2014)."""
    match = MANYLINUX.match(floor)
    if not match:
        return [floor]
    major, minor, arch = int(match.group(1)), int(match.group(2)), match.group(3)
    tags = []
    for older in range(minor, 4, -1):
        tags.append(f"manylinux_{major}_{older}_{arch}")
        if (major, older) in LEGACY_MANYLINUX:
            tags.append(f"{LEGACY_MANYLINUX[major, older]}_{arch}")
    return tags


def pip_command(
    spec: Spec,
    report: Path,
    target: Path,
    python: str,
    requirements: tuple[str, ...] | None = None,
    source: bool = False,
) -> list[str]:
    """Binary wheels of the closure; with source, the sdists of exactly `requirements`."""
    argv = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
    argv += ["--report", str(report), "--target", str(target)]
    argv += ["--no-deps", "--no-binary", ":all:"] if source else ["--only-binary", ":all:"]
    argv += ["--python-version", spec.python, "--implementation", "cp", "--abi", spec.abi]
    for tag in platforms(spec.platform):
        argv += ["--platform", tag]
    wanted = spec.requirements if requirements is None else requirements
    return [*argv, "--index-url", spec.index, *wanted]


def project_of(requirement: str, where: str) -> str:
    try:
        return canonicalize_name(Requirement(requirement).name)
    except InvalidRequirement as error:
        raise ResolveError(f"{where}: {requirement!r} is not a requirement ({error})") from None


def requirements_of(item: Mapping[str, Any]) -> list[str]:
    """An sdist's Requires-Dist that apply here (markers for this Python, no extras)."""
    wanted = []
    for text in item.get("metadata", {}).get("requires_dist") or []:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        requirement.marker = None
        wanted.append(str(requirement))
    return wanted


def pip_environment() -> dict[str, str]:
    """No configuration file (pip.conf's find-links, extra indexes, constraints) and no
    source from the environment; certificates and timeouts set there stay."""
    return {"PIP_CONFIG_FILE": os.devnull, **dict.fromkeys(PIP_SOURCE_VARIABLES, "")}


def check_interpreter(spec: Spec, python_version: str, machine: str) -> None:
    if python_version != spec.python or machine != spec.machine:
        raise ResolveError(
            f"{spec.name} is resolved for Python {spec.python} on {spec.machine}, and pip "
            f"evaluates environment markers with the Python it runs in ({python_version} on "
            f"{machine}), so the set would be wrong: run `efa-image lock update {spec.name}` "
            f"from a virtualenv of Python {spec.python} on {spec.machine}"
        )


def parse_report(spec: Spec, report: Mapping[str, Any]) -> Resolution:
    """The report's files (less the excluded projects) as lock `wheels`, by project name."""
    wheels, sdists, excluded = [], [], {}
    remote_index = not spec.index.startswith("file:")
    for item in report.get("install", []):
        metadata, info = item.get("metadata", {}), item.get("download_info", {})
        project, version = canonicalize_name(metadata.get("name", "")), metadata.get("version")
        url = str(info.get("url", ""))
        sha256 = (info.get("archive_info") or {}).get("hashes", {}).get("sha256", "")
        if project in spec.exclude:
            excluded[project] = str(version)
            continue
        filename = url.rsplit("/", 1)[-1]
        source = project in spec.sdists
        if source:
            try:
                lock_schema.sdist_name_version(filename, url)
            except LockError as error:
                raise ResolveError(
                    f"{project} {version}: {error}, which resolve.sdists asks for"
                ) from None
        if not source and not filename.endswith(".whl"):
            raise ResolveError(
                f"{project} {version}: {url} is not a wheel (binary wheels only; name the "
                "project in resolve.sdists to build it from source in the image)"
            )
        if remote_index and not url.startswith(("https://", "http://")):
            raise ResolveError(
                f"{project} {version} resolved to {url}, not a file of {spec.index}: "
                "pip took it from a local source"
            )
        if not lock_schema.SHA256.match(sha256):
            raise ResolveError(f"{project} {version}: the index gave no sha256 for {url}")
        (sdists if source else wheels).append(
            {"filename": filename, "urls": [url], "sha256": sha256}
        )
    missing = sorted(set(spec.exclude) - set(excluded))
    if missing:
        raise ResolveError(
            f"{spec.name}: resolve.exclude names {', '.join(missing)}, which the resolution "
            "does not contain: remove it from the lock entry"
        )
    if not wheels and not sdists:
        raise ResolveError(f"{spec.name}: the resolution installs nothing")
    wheels.sort(key=lambda wheel: lock_schema.wheel_name_version(wheel["filename"], spec.name))
    sdists.sort(key=lambda sdist: lock_schema.sdist_name_version(sdist["filename"], spec.name))
    return Resolution(wheels, dict(sorted(excluded.items())), sdists)


def resolve(spec: Spec, python: str = sys.executable) -> Resolution:
    """pip's resolution of the set for its target, from its index only."""
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    check_interpreter(spec, running, platform.machine())
    with tempfile.TemporaryDirectory(prefix="efa-image-resolve-") as scratch:
        reports = iter(range(1_000_000))

        def install(requirements: tuple[str, ...], source: bool) -> list[dict[str, Any]]:
            report = Path(scratch) / f"report-{next(reports)}.json"
            argv = pip_command(spec, report, Path(scratch) / "target", python, requirements, source)
            kind = "source distributions" if source else "wheels"
            print(
                f"resolving {' '.join(requirements)} ({kind}) for {spec.abi} {spec.platform} "
                f"on {spec.index}",
                flush=True,
            )
            run_command(argv, env=pip_environment())
            return json.loads(report.read_text()).get("install", [])

        where = f"{spec.name}: resolve.requirements"
        pending = [r for r in spec.requirements if project_of(r, where) in spec.sdists]
        binaries = [r for r in spec.requirements if project_of(r, where) not in spec.sdists]
        items: list[dict[str, Any]] = []
        taken: set[str] = set()
        # The sdists' own requirements: sdists again (resolve.sdists), or binaries.
        while pending:
            found = install(tuple(pending), source=True)
            items += found
            taken |= {project_of(r, where) for r in pending}
            pending = []
            for item in found:
                for requirement in requirements_of(item):
                    project = project_of(requirement, f"{spec.name}: requires_dist")
                    if project not in spec.sdists:
                        binaries.append(requirement)
                    elif project not in taken and requirement not in pending:
                        pending.append(requirement)
        items += install(tuple(binaries), source=False)
        return parse_report(spec, {"install": items})


def update(
    lock_path: Path,
    spec: Spec,
    store: Store,
    resolver: Callable[[Spec], Resolution] = resolve,
) -> Update:
    """Resolve, fetch and verify every file, then rewrite the entry's wheels and excluded."""
    resolution = resolver(spec)
    old = lock_path.read_text()
    document = lock_edit.LockDocument(old, str(lock_path))
    document.set_field(spec.name, "wheels", resolution.wheels)
    document.set_field(spec.name, "excluded", resolution.excluded)
    if spec.sdists or resolution.sdists:
        document.set_field(spec.name, "sdists", resolution.sdists)
    new = document.text()
    # Parsed as the build will: a file the cache refuses never reaches the lock.
    entry = yaml.safe_load(new)[LOCK_KEY][spec.name]
    where = f"{lock_path}: {LOCK_KEY}.{spec.name}"
    members = lock_schema.parse_wheelset(spec.name, entry, where)
    for member in members:
        store.get(member)
    if new != old:
        lock_path.write_text(new)
    diff = lock_edit.unified_diff(old, new, lock_path)
    return Update(spec.name, spec.version, len(members), diff)
