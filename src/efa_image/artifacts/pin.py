"""`efa-image lock update NAME`: pin an artifact's sha256 in the lock.

The file is downloaded without an expected sha256 (this is where the pin comes
from), hashed, moved into the cache under its digest, and the lock's text is
rewritten in place (comments and layout kept).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, replace

from efa_image.artifacts import lock
from efa_image.artifacts.artifact_store import Store, sha256_of


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    sha256: str
    # The lock's unified diff; "" when the lock already held this sha256.
    diff: str


def pin(loaded: lock.Lock, store: Store, name: str) -> Pin:
    """Download NAME, cache it by content and write its sha256 into the lock file."""
    artifact = loaded.get(name)
    path = store.get(replace(artifact, sha256=None))
    digest = sha256_of(path)
    pinned = store.cached_path(replace(artifact, sha256=digest))
    pinned.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, pinned)
    if digest == artifact.sha256:
        return Pin(artifact.name, artifact.version, digest, "")
    old = loaded.path.read_text()
    new = lock.set_sha256(old, artifact.name, digest)
    loaded.path.write_text(new)
    diff = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        str(loaded.path),
        str(loaded.path),
    )
    return Pin(artifact.name, artifact.version, digest, "".join(diff))
