"""Build cache: compiled installation trees kept on the controller, keyed by their inputs.

A role that compiles (libfabric, Open MPI, NCCL, aws-ofi-nccl, nccl-tests) asks
for an entry before it compiles. The key is the sha256 of everything that
decides the result: the component, its archive's sha256, its build options,
the checksums of the libraries it links against, the target's OS release and
architecture, the versions of the build packages it asks for (installed, or
apt's candidate: the version the build would install) and of the compilers and
-dev packages the target had before any build installed packages (the base
image's). Any change there is a different key, so an entry is only ever taken
for a build that would have produced the same tree.

The key is known before anything is installed: a hit needs no toolchain. Build
packages that other components installed for their builds are not in the key
(whether they were built or taken from the cache must not matter), so a
component names every build package its configure may use.

Entries are `<component>-<key>.tar.gz` with a `.sha256` beside it, written
atomically; an entry whose checksum does not match is treated as absent and
removed.

Where: `--build-cache` or EFA_IMAGE_BUILD_CACHE, a directory, an
`oci://HOST[:PORT]/REPOSITORY` (efa_image.building.registry_cache), or both as
`DIR,oci://...`: read the directory, then the registry; write both. Without a
directory it is the artifact cache's `builds/`; `off` disables the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from efa_image.artifacts.artifact_store import sha256_of
from efa_image.errors import EfaImageError
from efa_image.paths import default_cache_dir
from efa_image.registry.reference import OCI_SCHEME, Repository, parse_oci

FORMAT = 2
OFF = "off"
ENV = "EFA_IMAGE_BUILD_CACHE"
# Package names whose versions decide a compile: compilers, binutils, the C
# library and every -dev package (what configure scripts detect).
TOOLCHAIN = re.compile(r"^(gcc|g\+\+|cpp|binutils|libc6|nvidia-cuda-toolkit|cuda-nvcc)(-|$)|-dev$")
COMPONENT = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


class BuildCacheError(EfaImageError, ValueError):
    pass


@dataclass(frozen=True)
class Locations:
    """Where entries are read (the directory, then the registry) and written (both)."""

    directory: Path | None
    registry: Repository | None = None


def locations(setting: str | None = None) -> Locations:
    """`setting`, else EFA_IMAGE_BUILD_CACHE: `off`, DIR, oci://..., or DIR,oci://...;
    the directory defaults to the artifact cache's `builds/`."""
    value = setting if setting else os.environ.get(ENV, "")
    if value.strip() == OFF:
        return Locations(None)
    parts = [part.strip() for part in value.split(",") if part.strip()]
    remote = [part for part in parts if part.startswith(OCI_SCHEME)]
    local = [part for part in parts if not part.startswith(OCI_SCHEME)]
    if len(remote) > 1 or len(local) > 1 or OFF in local or any("://" in p for p in local):
        raise BuildCacheError(
            f"build cache {value!r}: give `off`, a directory, oci://HOST[:PORT]/REPOSITORY, "
            "or DIR,oci://HOST[:PORT]/REPOSITORY (the directory read first, both written)"
        )
    directory = Path(local[0]) if local else default_cache_dir() / "builds"
    return Locations(directory, parse_oci(remote[0]) if remote else None)


def toolchain_packages(dpkg_lines: str, baseline: str | None = None) -> list[str]:
    """`name=version` of the packages that decide a compile, from `dpkg-query -W` lines.

    With a baseline (the package names present before the first build install),
    only those: what builds installed since is not the target's own.
    """
    kept = None if baseline is None else set(baseline.split())
    selected = set()
    for line in dpkg_lines.splitlines():
        name, sep, version = line.strip().partition("=")
        if not sep:
            continue
        bare = name.split(":")[0]
        if TOOLCHAIN.search(bare) and (kept is None or bare in kept or name in kept):
            selected.add(f"{name}={version}")
    return sorted(selected)


def requested_versions(policy: str) -> dict[str, str]:
    """Per package of `apt-cache policy NAME...`: the installed version, else the candidate."""
    versions: dict[str, str] = {}
    name, installed = "", ""
    for line in policy.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith(":"):
            name, installed = line.strip()[:-1], ""
        elif name and (field := line.strip()).startswith("Installed:"):
            installed = field.split(":", 1)[1].strip()
        elif name and field.startswith("Candidate:"):
            candidate = field.split(":", 1)[1].strip()
            versions[name] = installed if installed not in ("", "(none)") else candidate
    return versions


def probe_sections(output: str) -> dict[str, str]:
    """The `## name` sections of the target's probe (os, installed, baseline, policy)."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in output.splitlines():
        if line.startswith("## "):
            current = sections.setdefault(line[3:].strip(), [])
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines) + "\n" for name, lines in sections.items()}


def key(
    component: str,
    inputs: Mapping[str, Any],
    os_release: str,
    packages: str,
    *,
    baseline: str | None = None,
    policy: str = "",
) -> str:
    """sha256 over the component, its inputs, the target's OS, its own toolchain packages
    and the versions of the build packages requested (`apt-cache policy` of them)."""
    if not COMPONENT.match(component):
        raise BuildCacheError(f"build cache: bad component name {component!r}")
    document = {
        "format": FORMAT,
        "component": component,
        "inputs": inputs,
        "os": sorted(line.strip() for line in os_release.splitlines() if line.strip()),
        "packages": toolchain_packages(packages, baseline),
        "build_packages": requested_versions(policy),
    }
    encoded = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()


def entry(directory: Path, component: str, digest: str) -> Path:
    return directory / f"{component}-{digest}.tar.gz"


def _checksum_file(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def stored_glob(directory: Path, component: str) -> str:
    """A glob for the checksum files of `component`'s entries, whatever their key: store()
    writes an entry's checksum last, so each file it matches stands for a whole entry."""
    return str(_checksum_file(entry(directory, component, "*")))


def lookup(directory: Path, component: str, digest: str) -> Path | None:
    """The entry's archive when present and intact; a damaged entry is removed."""
    path = entry(directory, component, digest)
    recorded = _checksum_file(path)
    if not path.is_file() or not recorded.is_file():
        return None
    if recorded.read_text().split()[0:1] == [sha256_of(path)]:
        return path
    path.unlink(missing_ok=True)
    recorded.unlink(missing_ok=True)
    return None


def store(directory: Path, component: str, digest: str, write: Callable[[Path], None]) -> Path:
    """Store an entry: `write(tmp)` produces the archive; it appears whole or not at all."""
    directory.mkdir(parents=True, exist_ok=True)
    path = entry(directory, component, digest)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        write(partial)
        if not partial.is_file() or partial.stat().st_size == 0:
            raise BuildCacheError(f"build cache: no archive was written for {component}")
        checksum = sha256_of(partial)
        tmp_sum = partial.with_name(partial.name + ".sha256")
        tmp_sum.write_text(f"{checksum}  {path.name}\n")
        # The archive first, its checksum last: lookup() needs both.
        os.replace(partial, path)
        os.replace(tmp_sum, _checksum_file(path))
    finally:
        partial.unlink(missing_ok=True)
        partial.with_name(partial.name + ".sha256").unlink(missing_ok=True)
    return path
