"""The artifact lock's model: one pinned file (Artifact) and the lock's keys.

Apart from efa_image.artifacts.lock (loading) and lock_schema (validation) so
that both, and the editor (lock_edit), share it without importing each other,
and so that what only handles Artifacts (artifact_store, which the CLI imports
when `efa-image setup` runs in the system Python, before the virtualenv and its
packaging exist) needs nothing but the standard library.
`from efa_image.artifacts import lock` gives the same names.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from efa_image.errors import EfaImageError

# The lock's mapping in playbooks/group_vars/all/versions.yml, and an overlay's.
LOCK_KEY = "efa_image_artifacts"
OVERLAY_KEY = "efa_image_artifacts_overlay"
# The kind of an entry that stands for a resolved requirement and its closure.
WHEELSET = "wheelset"
# The digests a lock entry may pin its file by (exactly one per entry): sha256, or
# sha512 where that is all the publisher gives (aws-ofi-nccl's releases).
DIGEST_KINDS = ("sha256", "sha512")


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
    # An entry pinned by sha512 has sha256 None and digest_kind "sha512" (also while
    # its `sha512:` is still empty, so that `lock update` writes that kind).
    sha512: str | None = None
    digest_kind: str = "sha256"
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
    def digest(self) -> str | None:
        """The lock's pin of the file, of the kind digest_kind names (None: unpinned)."""
        return self.sha512 if self.digest_kind == "sha512" else self.sha256

    @property
    def pinned(self) -> bool:
        return self.digest is not None

    def with_digest(self, digest: str | None) -> Artifact:
        """The same entry pinned to digest (of its digest_kind), or unpinned with None."""
        return replace(self, **{self.digest_kind: digest})

    def mirror_path(self) -> str:
        """Where the artifact lies in a mirror, relative to its root."""
        return f"{self.name}/{self.version}/{self.filename}"

    def used_with(self, method: str | None) -> bool:
        """Whether its role, using method, needs this artifact (no methods listed: any)."""
        return not self.methods or method in self.methods
