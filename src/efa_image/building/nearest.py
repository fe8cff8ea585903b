"""The nearest flavour and profile that the reachable sources (or the mirror) can build.

When the pre-flight finds artifacts that cannot be had, the other combinations
of the catalog are pre-flighted too, all their artifacts at once, closest
first: the same flavour with another profile, then a reduced flavour (one whose
roles are a subset) with the same profile, then both changed. The first one
whose artifacts can all be had and whose versions pass the compatibility rules
is named as a command, with what it leaves out compared with the request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from efa_image.artifacts.artifact_store import Availability, Store
from efa_image.artifacts.lock import Artifact, Lock
from efa_image.building.flavors import Catalog
from efa_image.building.images import BaseCuda
from efa_image.compat import rules
from efa_image.compat.planned import compat_facts


@dataclass(frozen=True)
class Candidate:
    """A flavour and profile, and why it cannot be built (nothing when it can)."""

    flavor: str
    profile: str
    needed: tuple[Artifact, ...]
    missing: tuple[str, ...] = ()
    incompatible: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.missing and not self.incompatible

    @property
    def label(self) -> str:
        return f"{self.flavor}/{self.profile}"

    @property
    def why(self) -> str:
        reasons = [f"lacks {', '.join(self.missing)}"] if self.missing else []
        if self.incompatible:
            reasons.append(f"breaks {', '.join(self.incompatible)}")
        return "; ".join(reasons)


def _method_changes(catalog: Catalog, roles: list[str], old: str, new: str) -> int:
    before, after = catalog.methods(old), catalog.methods(new)
    return sum(before.get(role) != after.get(role) for role in roles)


def combinations(catalog: Catalog, flavor: str, profile: str) -> list[tuple[str, str]]:
    """The other flavour/profile pairs to try, closest first."""
    roles = catalog.roles(flavor)
    others = sorted(
        (name for name in catalog.profiles if name != profile),
        key=lambda name: _method_changes(catalog, roles, profile, name),
    )
    reduced = sorted(
        (
            name
            for name in catalog.buildable()
            if name != flavor and set(catalog.roles(name)) < set(roles)
        ),
        key=lambda name: len(set(roles) - set(catalog.roles(name))),
    )
    same_flavor = [] if flavor in catalog.planned else [(flavor, name) for name in others]
    return [
        *same_flavor,
        *((name, profile) for name in reduced),
        *((name, other) for name in reduced for other in others),
    ]


def search(
    catalog: Catalog,
    lock_for: Callable[[str], Lock],
    store: Store,
    flavor: str,
    profile: str,
    checks: list[Availability],
) -> list[Candidate]:
    """Every other combination, judged by one parallel pre-flight of all their artifacts."""
    combos = combinations(catalog, flavor, profile)
    needed = {combo: catalog.needed(lock_for(combo[1]), *combo) for combo in combos}
    known = {check.artifact: check for check in checks}
    todo = list(dict.fromkeys(a for combo in combos for a in needed[combo] if a not in known))
    known.update((check.artifact, check) for check in store.preflight(todo))
    candidates = []
    for combo in combos:
        artifacts = needed[combo]
        facts = compat_facts(
            artifacts, catalog.roles(combo[0]), catalog.methods(combo[1]), BaseCuda()
        )
        candidates.append(
            Candidate(
                *combo,
                needed=tuple(artifacts),
                missing=tuple(a.name for a in artifacts if not known[a].ok),
                incompatible=tuple(v.rule for v in rules.check(facts).violations),
            )
        )
    return candidates


def _listed(names: list[str]) -> str:
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else "".join(names)


def differences(catalog: Catalog, flavor: str, profile: str, found: Candidate) -> list[str]:
    """What the found combination leaves out or does otherwise than the request."""
    lines = []
    dropped = [role for role in catalog.roles(flavor) if role not in catalog.roles(found.flavor)]
    if dropped:
        lines.append(f"It leaves out the roles {_listed(dropped)}.")
        if about := catalog.descriptions.get(found.flavor):
            lines.append(f"{found.flavor}: {about}")
    if found.profile != profile:
        before, after = catalog.methods(profile), catalog.methods(found.profile)
        changed: dict[tuple[str, str], list[str]] = {}
        for role in catalog.roles(found.flavor):
            if role in after and before.get(role) != after[role]:
                changed.setdefault((after[role], before.get(role, "none")), []).append(role)
        how = [
            f"{_listed(roles)} by {new} instead of {old}" for (new, old), roles in changed.items()
        ]
        lines.append(
            f"Profile {found.profile} instead of {profile}"
            + (f" builds {'; '.join(how)}." if how else " uses the same methods.")
        )
    artifacts = ", ".join(f"{a.name} {a.version}" for a in found.needed)
    lines.append(f"Its artifacts, all at hand: {artifacts or 'none'}.")
    return lines


def advice(
    catalog: Catalog, flavor: str, profile: str, candidates: list[Candidate], mirror: str | None
) -> str:
    """The remedy naming the nearest combination that can be built, or saying none can."""
    where, hold = (f"the mirror {mirror}", "holds") if mirror else ("the reachable sources", "hold")
    found = next((candidate for candidate in candidates if candidate.ok), None)
    nearer = candidates[: candidates.index(found)] if found else candidates
    if found is None:
        lines = [f"No other flavour and profile can be built from {where} either:"]
        lines += [f"  {candidate.label} {candidate.why}" for candidate in candidates]
        return "\n".join(lines) if candidates else lines[0].rstrip(":") + "."
    make_mirror, cli_mirror = (f" MIRROR={mirror}", f" --mirror {mirror}") if mirror else ("", "")
    lines = [
        f"Or build the nearest flavour and profile that {where} {hold} everything for:",
        f"  make image FLAVOR={found.flavor} PROFILE={found.profile}{make_mirror}",
        f"  (efa-image build --flavor {found.flavor} --profile {found.profile}{cli_mirror})",
    ]
    lines += [f"  {line}" for line in differences(catalog, flavor, profile, found)]
    if nearer:
        lines.append(
            "  Nearer combinations cannot be built: "
            + "; ".join(f"{candidate.label} {candidate.why}" for candidate in nearer)
            + "."
        )
    return "\n".join(lines)
