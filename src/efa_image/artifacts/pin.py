"""`efa-image lock update NAME`: pin an artifact's digest in the lock.

The file is downloaded without an expected digest (this is where the pin comes
from), hashed, moved into the cache under its digest, and the lock's text is
rewritten in place (comments and layout kept). The digest is of the kind the
entry uses: `sha256:`, or `sha512:` for an entry that is pinned (or left empty)
that way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from efa_image.artifacts import lock, lock_edit
from efa_image.artifacts.artifact_store import Store, digest_of


@dataclass(frozen=True)
class PinnedFile:
    """What `lock update` did for one file: the digest it pinned, and the lock's change."""

    name: str
    version: str
    digest: str
    # The lock's unified diff; "" when the lock already held this digest.
    diff: str
    digest_kind: str = "sha256"


def pin(loaded: lock.Lock, store: Store, name: str) -> PinnedFile:
    """Download NAME, cache it by content and write its digest into the lock file."""
    artifact = loaded.get(name)
    kind = artifact.digest_kind
    path = store.get(artifact.with_digest(None))
    digest = digest_of(path, kind)
    pinned = store.cached_path(artifact.with_digest(digest))
    pinned.parent.mkdir(parents=True, exist_ok=True)
    os.replace(path, pinned)
    if digest == artifact.digest:
        return PinnedFile(artifact.name, artifact.version, digest, "", kind)
    old = loaded.path.read_text()
    new = lock_edit.set_field(old, artifact.name, kind, digest)
    loaded.path.write_text(new)
    diff = lock_edit.unified_diff(old, new, loaded.path)
    return PinnedFile(artifact.name, artifact.version, digest, diff, kind)
