"""Image fingerprints: every input of an image build in one digest.

Two builds with the same fingerprint produce the same image: the flavour and
profile, the base image's ID, the resolved lock entries and the overlays, the
files of the roles and playbooks that run (and the Packer templates, Ansible
settings and strategy plugin, and the efa_image code their plugins import),
Ansible's version and the extra variables. Build caches, mirrors and the
repository do not change an image, so they are not inputs.

`efa-image build` labels the image with its fingerprint and, once the image
passed verification, records it under the artifact cache's `images/`. A build
whose fingerprint is recorded and whose image still exists (with that label)
reuses the image: it is tagged again and nothing runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from efa_image.artifacts.lock import Artifact
from efa_image.paths import default_cache_dir

FORMAT = 1
LABEL = "org.efa-image.fingerprint"
INCLUDE_KEYS = {
    "include_role",
    "import_role",
    "ansible.builtin.include_role",
    "ansible.builtin.import_role",
}
# Per role, what does not reach an image: its tests and its documentation.
NOT_IN_IMAGE = {"molecule", "README.md", "__pycache__"}
# Beside the roles, what every build runs (relative to the project root).
SHARED_INPUTS = ("playbooks", "packer", "ansible.cfg", "plugins", "src/efa_image")
# libyaml's loader where PyYAML has it: every build parses every task file.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Fingerprint:
    digest: str
    inputs: dict[str, Any]


def _included_roles(node: object) -> Iterator[str]:
    """Literal role names of include_role/import_role tasks and meta dependencies."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in INCLUDE_KEYS and isinstance(value, dict):
                name = value.get("name")
                if isinstance(name, str) and "{{" not in name:
                    yield name
            elif key == "dependencies" and isinstance(value, list):
                for dep in value:
                    name = dep.get("role", dep.get("name")) if isinstance(dep, dict) else dep
                    if isinstance(name, str):
                        yield name
            yield from _included_roles(value)
    elif isinstance(node, list):
        for item in node:
            yield from _included_roles(item)


def _yaml_files(directory: Path) -> Iterator[Path]:
    for path in sorted(directory.rglob("*.yml")):
        if not NOT_IN_IMAGE.intersection(path.relative_to(directory).parts):
            yield path


def _references(files: Iterable[Path]) -> set[str]:
    names: set[str] = set()
    for path in files:
        names.update(_included_roles(yaml.load(path.read_text(), Loader=SAFE_LOADER)))
    return names


def roles_that_run(root: Path, flavor_roles: Sequence[str]) -> list[str]:
    """The flavour's roles and every role they or the playbooks include, transitively."""
    roles_dir = root / "roles"
    pending = set(flavor_roles) | _references(_yaml_files(root / "playbooks"))
    found: set[str] = set()
    while pending:
        name = pending.pop()
        if name in found or not (roles_dir / name).is_dir():
            continue
        found.add(name)
        pending |= _references(_yaml_files(roles_dir / name)) - found
    return sorted(found)


def tree_digest(root: Path, paths: Iterable[Path]) -> str:
    """sha256 over the relative names and contents of every file under `paths`."""
    digest = hashlib.sha256()
    files: set[Path] = set()
    for path in paths:
        candidates = [path] if path.is_file() else path.rglob("*")
        files.update(
            f
            for f in candidates
            if f.is_file() and not NOT_IN_IMAGE.intersection(f.relative_to(path).parts)
        )
    for file in sorted(files):
        digest.update(str(file.relative_to(root)).encode() + b"\0")
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()


def compute(
    root: Path,
    *,
    flavor: str,
    profile: str,
    flavor_roles: Sequence[str],
    base_image_id: str,
    artifacts: Iterable[Artifact],
    overlays: Iterable[Path],
    extra_vars: Sequence[str],
) -> Fingerprint:
    roles = roles_that_run(root, flavor_roles)
    inputs: dict[str, Any] = {
        "format": FORMAT,
        "flavor": flavor,
        "profile": profile,
        "base_image": base_image_id,
        "artifacts": sorted([a.name, a.version, a.filename, a.digest or ""] for a in artifacts),
        "overlays": [hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in overlays],
        "roles": {name: tree_digest(root, [root / "roles" / name]) for name in roles},
        "shared": tree_digest(root, [root / path for path in SHARED_INPUTS]),
        "ansible": metadata.version("ansible-core"),
        "extra_vars": list(extra_vars),
    }
    encoded = json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()
    return Fingerprint(hashlib.sha256(encoded).hexdigest(), inputs)


def verified_dir() -> Path:
    return default_cache_dir() / "images"


def record_verified(
    fingerprint: Fingerprint, image: str, directory: Path | None = None, origin: str = ""
) -> Path:
    """Written only after the image passed verification, here or (origin: the registry
    reference it was pulled as) on the machine that pushed it: what a later build may reuse."""
    directory = directory or verified_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{fingerprint.digest}.json"
    partial = path.with_suffix(f".{os.getpid()}.partial")
    record = {
        "image": image,
        "verified": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "inputs": fingerprint.inputs,
    }
    if origin:
        record["origin"] = origin
    partial.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    partial.replace(path)
    return path


def verified_image(digest: str, directory: Path | None = None) -> str | None:
    """The image recorded as verified for this fingerprint, if any."""
    path = (directory or verified_dir()) / f"{digest}.json"
    try:
        image = json.loads(path.read_text()).get("image")
    except (OSError, ValueError):
        return None
    return image if isinstance(image, str) and image.startswith("sha256:") else None
