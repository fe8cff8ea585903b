"""The dataclasses that cross sub-packages, in one module that imports none of them.

A request or a finding is made in one module and read in another (the CLI
makes the build request, Packer's variables and the build plan read it; the
nccl-tests parser and the verification report both make findings). Keeping
them here, beside no behaviour, is what keeps those modules from importing
each other (molecule keeps its shared types the same way, in `types.py`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BuildRequest:
    """What `efa-image build` was asked for, before anything is resolved."""

    flavor: str
    profile: str
    base_image: str
    repository: str
    mirror: str | None
    overlays: tuple[str, ...]
    extra_vars: tuple[str, ...] = ()
    # The build cache (efa_image.building.build_cache): "" for the default directory, "off",
    # DIR, oci://HOST[:PORT]/REPOSITORY or DIR,oci://...
    build_cache: str = ""
    # Build even when a verified image with the same fingerprint exists.
    rebuild: bool = False
    # HOST[:PORT]/NAME where verified images are looked up by fingerprint before building
    # (efa_image.building.published); "" for none.
    reuse_from: str = ""
    # Look for the flavour's components in the base image (efa_image.building.basecontents):
    # found ones are verified and recorded (method present), not installed.
    detect: bool = True


@dataclass(frozen=True)
class Finding:
    """One check of a verification report."""

    check: str
    # None: a fact reported, neither passed nor failed (what this host cannot show).
    ok: bool | None
    detail: str
