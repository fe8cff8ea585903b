"""The compatibility rules (efa_image.compat) applied to a planned build.

Before a build starts, the version facts come from the lock entries it needs,
the profile's methods and the base image's CUDA; the rules' outcome is printed
and a violation stops the build before any build work.
"""

from __future__ import annotations

from efa_image import compat
from efa_image.errors import EfaImageError
from efa_image.images import BaseCuda
from efa_image.lock import Artifact

# Source archives that are compiled against CUDA (the wheel and packages are not).
CUDA_ARCHIVES = {"nccl", "aws_ofi_nccl", "nccl_tests"}


def compat_facts(
    needed: list[Artifact], roles: list[str], methods: dict[str, str], cuda: BaseCuda
) -> dict[str, str]:
    """What the compatibility rules know before a build starts."""
    artifacts = {artifact.name: artifact for artifact in needed}
    facts = {"efa_method": methods.get("efa", "")}
    if "efa_installer" in artifacts:
        facts["efa_installer"] = artifacts["efa_installer"].version
    if "libfabric" in artifacts:
        facts["libfabric"] = artifacts["libfabric"].version
    if "nccl" in roles:
        source = artifacts.get("nccl") or artifacts.get("nccl_wheel")
        if source:
            facts["nccl"] = source.version
        if "nccl_wheel" in artifacts:
            major = compat.nccl_cuda_major(artifacts["nccl_wheel"].filename)
            if major:
                facts["nccl_cuda_major"] = major
    if "aws_ofi_nccl" in artifacts:
        facts["aws_ofi_nccl"] = artifacts["aws_ofi_nccl"].version
    if cuda.major:
        facts["base_cuda_major"] = cuda.major
    return facts


def check_compatibility(facts: dict[str, str]) -> compat.Check:
    """Every rule's outcome is printed; violations stop the build before any build work."""
    result = compat.check(facts)
    for rule in result.passed:
        print(f"  ok   {rule}")
    for skipped in result.skipped:
        print(f"  skip {skipped.rule}: {skipped.why}")
    for violation in result.violations:
        print(f"  BAD  {violation.rule}: {violation.message}")
    if not result.ok:
        raise EfaImageError(
            "incompatible versions, nothing was built:\n"
            + "\n".join(f"  - {v.message} ({v.reference})" for v in result.violations)
        )
    return result


def needs_nvcc(needed: list[Artifact]) -> bool:
    """Whether the build compiles against CUDA (and so needs nvcc in the base image)."""
    return any(artifact.name in CUDA_ARCHIVES for artifact in needed)
