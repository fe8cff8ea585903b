"""Build cache: compiled installation trees kept on the controller, keyed by their inputs.

A role that compiles (libfabric, Open MPI, NCCL, aws-ofi-nccl, nccl-tests) asks
for an entry before it compiles. The key is the sha256 of everything that
decides the result: the component, its archive's sha256, its build options,
the checksums of the libraries it links against, the target's OS release and
architecture, and the versions of the compilers and every -dev package
installed on the target.
Any change there is a different key, so an entry is only ever taken for a build
that would have produced the same tree.

Entries are `<component>-<key>.tar.gz` with a `.sha256` beside it, written
atomically; an entry whose checksum does not match is treated as absent and
removed. EFA_IMAGE_BUILD_CACHE sets the directory (default: the artifact
cache's `builds/`); `off` disables the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from efa_image.artifacts import default_cache_dir, sha256_of

FORMAT = 1
OFF = "off"
ENV = "EFA_IMAGE_BUILD_CACHE"
# Package names whose versions decide a compile: compilers, binutils, the C
# library and every -dev package (what configure scripts detect).
TOOLCHAIN = re.compile(r"^(gcc|g\+\+|cpp|binutils|libc6|nvidia-cuda-toolkit|cuda-nvcc)(-|$)|-dev$")
COMPONENT = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


class BuildCacheError(ValueError):
    pass


def cache_dir(setting: str | None = None) -> Path | None:
    """`setting`, else EFA_IMAGE_BUILD_CACHE, else the default directory; None when off."""
    value = setting if setting else os.environ.get(ENV, "")
    if value == OFF:
        return None
    return Path(value) if value else default_cache_dir() / "builds"


def toolchain_packages(dpkg_lines: str) -> list[str]:
    """`name=version` of the packages that decide a compile, from `dpkg-query -W` lines."""
    selected = set()
    for line in dpkg_lines.splitlines():
        name, sep, version = line.strip().partition("=")
        if not sep:
            continue
        if TOOLCHAIN.search(name.split(":")[0]):
            selected.add(f"{name}={version}")
    return sorted(selected)


def key(component: str, inputs: Mapping[str, Any], os_release: str, packages: str) -> str:
    """sha256 over the component, its inputs, the target's OS and its toolchain packages."""
    if not COMPONENT.match(component):
        raise BuildCacheError(f"build cache: bad component name {component!r}")
    document = {
        "format": FORMAT,
        "component": component,
        "inputs": inputs,
        "os": sorted(line.strip() for line in os_release.splitlines() if line.strip()),
        "packages": toolchain_packages(packages),
    }
    encoded = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()


def entry(directory: Path, component: str, digest: str) -> Path:
    return directory / f"{component}-{digest}.tar.gz"


def _checksum_file(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


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
