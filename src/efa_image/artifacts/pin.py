"""`efa-image lock update NAME`: pin an artifact's sha256 in the lock.

The file is downloaded without an expected sha256 (this is where the pin comes
from), hashed, moved into the cache under its digest, and the lock's text is
rewritten in place (comments and layout kept).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from efa_image.artifacts import lock, lock_edit
from efa_image.artifacts.artifact_store import Store, sha256_of


@dataclass(frozen=True)
class PinnedFile:
    """What `lock update` did for one file: the sha256 it pinned, and the lock's change."""

    name: str
    version: str
    sha256: str
    # The lock's unified diff; "" when the lock already held this sha256.
    diff: str


def pin(loaded: lock.Lock, store: Store, name: str) -> PinnedFile:
    """Download NAME, cache it by content and write its sha256 into the lock file."""
    artifact = loaded.get(name)
    path = store.get(replace(artifact, sha256=None))
    digest = sha256_of(path)
    pinned = store.cached_path(replace(artifact, sha256=digest))
    pinned.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, pinned)
    if digest == artifact.sha256:
        return PinnedFile(artifact.name, artifact.version, digest, "")
    old = loaded.path.read_text()
    new = lock_edit.set_sha256(old, artifact.name, digest)
    loaded.path.write_text(new)
    return PinnedFile(
        artifact.name, artifact.version, digest, lock_edit.unified_diff(old, new, loaded.path)
    )
