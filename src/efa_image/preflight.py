"""The pre-flight of `efa-image build`, `fetch` and `mirror create`.

Every artifact a command needs is checked at once (cache, then its sources or
the mirror) before any slow step, and every one that cannot be had is named in
one message with the remedies: a mirror, and for a flavour's build another
profile or the reduced flavour.
"""

from __future__ import annotations

import time

from efa_image.artifacts import Check
from efa_image.context import Context, Selection
from efa_image.errors import EfaImageError


def run(context: Context, selection: Selection, suggest: bool = True) -> list[Check]:
    """Check the selection, print each outcome, and stop with the remedies if any failed."""
    start = time.monotonic()
    checks = context.store.preflight(selection.artifacts)
    for check in checks:
        mark = "ok " if check.ok else "BAD"
        print(f"  {mark} {check.artifact.name:28} {check.artifact.version:12} {check.detail}")
    print(f"pre-flight: {len(checks)} artifacts checked in {time.monotonic() - start:.1f}s")
    if all(check.ok for check in checks):
        return checks
    other, hint = None, ""
    if suggest and selection.flavor and selection.profile:
        other = "portable" if selection.profile != "portable" else None
        hint = reduced_hint(selection.flavor, checks)
    raise EfaImageError(report(checks, context.store.mirror, other, hint))


def reduced_hint(flavor: str, checks: list[Check]) -> str:
    """The efa flavour never leaves the plugin or nccl-tests out silently; say what would."""
    missing = {check.artifact.name for check in checks if not check.ok}
    if flavor == "efa" and missing <= {"aws_ofi_nccl", "nccl_tests"}:
        return (
            "Or build the efa-reduced flavour (FLAVOR=efa-reduced), which leaves aws-ofi-nccl "
            "and nccl-tests out: without the plugin NCCL does not use EFA."
        )
    return ""


def report(
    checks: list[Check], mirror: str | None, other_profile: str | None, hint: str = ""
) -> str:
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
    if other_profile:
        lines.append(
            f"Or choose the {other_profile} profile (PROFILE={other_profile}), which builds "
            "from the upstream archives Debian's source pool serves, PyPI and distro packages."
        )
    if hint:
        lines.append(hint)
    return "\n".join(lines)
