"""The pre-flight of `efa-image build`, `fetch` and `mirror create`.

Every artifact a command needs is checked at once (cache, then its sources or
the mirror) before any slow step, and every one that cannot be had is named in
one message with the remedies: a mirror, and for a flavour's build the nearest
flavour and profile that the same sources can build (efa_image.building.nearest).
"""

from __future__ import annotations

import time

from efa_image.artifacts.artifact_store import Availability
from efa_image.artifacts.context import Context, Selection
from efa_image.building import nearest
from efa_image.compat import smdistributed
from efa_image.errors import EfaImageError


def run(context: Context, selection: Selection, suggest: bool = True) -> list[Availability]:
    """The lock's own problems, then the sources (check_sources)."""
    # Needs no download: a lock entry that is no known smdistributed build, or a
    # flavour with smdistributed but no PyTorch, is refused before anything else.
    # (`efa-image build` judges these with its other compatibility facts.)
    roles = context.catalog.roles(selection.flavor) if selection.flavor else None
    smdistributed.check_lock(selection.artifacts, roles)
    return check_sources(context, selection, suggest)


def check_sources(
    context: Context, selection: Selection, suggest: bool = True
) -> list[Availability]:
    """Check the selection, print each outcome, and stop with the remedies if any failed."""
    start = time.monotonic()
    checks = context.store.preflight(selection.artifacts)
    for check in checks:
        mark = "ok " if check.ok else "BAD"
        print(f"  {mark} {check.artifact.name:28} {check.artifact.version:12} {check.detail}")
    print(f"pre-flight: {len(checks)} artifacts checked in {time.monotonic() - start:.1f}s")
    if all(check.ok for check in checks):
        return checks
    advice = ""
    if suggest and selection.flavor and selection.profile:
        start = time.monotonic()
        flavor, profile = selection.flavor, selection.profile
        candidates = nearest.search(
            context.catalog, context.lock_for, context.store, flavor, profile, checks
        )
        print(
            f"pre-flight: {len(candidates)} other flavour/profile combinations checked "
            f"in {time.monotonic() - start:.1f}s",
            flush=True,
        )
        advice = nearest.advice(context.catalog, flavor, profile, candidates, context.store.mirror)
    raise EfaImageError(report(checks, context.store.mirror, advice))


def report(checks: list[Availability], mirror: str | None, advice: str = "") -> str:
    """One message naming every artifact that a build could not get, and the remedies."""
    bad = [check for check in checks if not check.ok]
    lines = [f"{len(bad)} of {len(checks)} artifacts cannot be had:"]
    for check in bad:
        lines.append(
            f"  {check.artifact.name} {check.artifact.version} ({check.artifact.filename})"
        )
        lines.append(f"      {check.detail}")
    if mirror:
        lines.append(f"Put the files into the mirror {mirror} (layout: NAME/VERSION/FILENAME).")
    else:
        lines.append(
            "Remedy: build from a mirror that holds them (--mirror DIR|URL or EFA_IMAGE_MIRROR; "
            "`efa-image mirror create DIR` makes one where the sources are reachable)."
        )
    if advice:
        lines.append(advice)
    return "\n".join(lines)
