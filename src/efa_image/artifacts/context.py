"""What the artifact commands work with: the lock (with overlays), the store, the catalog.

A profile may build from a lock overlay (portable: Debian's source pool); it is
applied before the user's overlays. `lock_for` loads the same lock as another
profile sees it, for the pre-flight's search of a combination that can be built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from efa_image.artifacts import lock
from efa_image.artifacts.artifact_store import Store
from efa_image.building.flavors import Catalog, load_catalog


@dataclass(frozen=True)
class Selection:
    """The artifacts a command works on; flavour and profile when chosen by them."""

    artifacts: list[lock.Artifact]
    flavor: str | None = None
    profile: str | None = None


@dataclass
class Context:
    lock: lock.Lock
    store: Store
    catalog: Catalog
    # The overlays the lock was loaded with: the profile's first, then the user's.
    overlays: list[Path]
    lock_file: Path | None = None
    user_overlays: list[Path] = field(default_factory=list)
    # The locks loaded so far, by profile.
    by_profile: dict[str, lock.Lock] = field(default_factory=dict, repr=False)

    def lock_for(self, profile: str) -> lock.Lock:
        """The lock as a build with `profile` loads it (its overlay, then the user's)."""
        if profile not in self.by_profile:
            overlays = with_profile_overlay(self.catalog, profile, self.user_overlays)
            self.by_profile[profile] = lock.load(self.lock_file, overlays)
        return self.by_profile[profile]

    def select(
        self,
        names: Sequence[str] | None,
        flavor: str | None,
        profile: str | None,
        everything: bool = False,
    ) -> Selection:
        """Artifacts by name, the whole lock (everything, no flavour), or a flavour's."""
        if names:
            return Selection(self.lock.select(names))
        if everything and not flavor:
            return Selection(list(self.lock.artifacts.values()))
        flavor = flavor or self.catalog.default_flavor
        profile = profile or self.catalog.default_profile
        return Selection(self.catalog.needed(self.lock, flavor, profile), flavor, profile)


def with_profile_overlay(catalog: Catalog, profile: str, overlays: Sequence[Path]) -> list[Path]:
    """The profile's lock overlays (those not given already) before `overlays`."""
    own = [path for path in catalog.overlay(profile) if path not in overlays]
    return [*own, *overlays]


def load(
    lock_file: Path | None,
    overlays: Sequence[Path],
    profile: str | None,
    store: Store,
    catalog: Catalog | None = None,
) -> Context:
    """The context of one command; profile "" means the default, None no profile overlay."""
    catalog = catalog or load_catalog()
    user = list(overlays)
    effective = user
    if profile is not None:
        effective = with_profile_overlay(catalog, profile or catalog.default_profile, user)
    loaded = lock.load(lock_file, effective)
    known = {profile or catalog.default_profile: loaded} if profile is not None else {}
    return Context(loaded, store, catalog, effective, lock_file, user, known)


def role_lock(profile: str | None = None) -> lock.Lock:
    """The lock as a role run with `profile` (None: the default) resolves it: the
    profile's overlay (the playbooks apply it), then EFA_IMAGE_LOCK_OVERLAY's files."""
    catalog = load_catalog()
    profile = profile or catalog.default_profile
    return lock.load(None, with_profile_overlay(catalog, profile, lock.env_overlays()))
