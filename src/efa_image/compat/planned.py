"""The compatibility rules (efa_image.compat.rules) applied to a planned build.

Before a build starts, the version facts come from the lock entries it needs,
the profile's methods, the base image's CUDA and, where the efa role installs
the distribution's libfabric (method package), the base image's libfabric
package (efa_image.building.distro); the rules' outcome is printed
and a violation stops the build before any build work.

The torch side comes from the pytorch wheel set (efa_image.compat.pytorch.torch_facts:
torch's version and CUDA, the NCCL it was built with and the one it loads).
`efa-image build` judges every fact once, in its plan (efa_image.building.plan),
before any artifact source is asked; verification checks them again in the image.
"""

from __future__ import annotations

from efa_image.artifacts.lock import Artifact
from efa_image.building.distro import DistroLibfabric
from efa_image.building.images import BaseCuda
from efa_image.compat import pytorch, rules
from efa_image.errors import EfaImageError

# Source archives that are compiled against CUDA (the wheel and packages are not).
CUDA_ARCHIVES = {"nccl", "aws_ofi_nccl", "nccl_tests"}


def compat_facts(
    needed: list[Artifact],
    roles: list[str],
    methods: dict[str, str],
    cuda: BaseCuda,
    distro: DistroLibfabric | None = None,
) -> dict[str, str]:
    """What the compatibility rules know before a build starts.

    `distro`: the base image's libfabric package (efa_image.building.distro.probe_for), for
    the package method; without it that method's libfabric rules are skipped.
    """
    artifacts = {artifact.name: artifact for artifact in needed}
    facts = {"efa_method": methods.get("efa", "")}
    if "efa_installer" in artifacts:
        facts["efa_installer"] = artifacts["efa_installer"].version
    if "libfabric" in artifacts:
        facts["libfabric"] = artifacts["libfabric"].version
    if facts["efa_method"] == "package" and "efa" in roles:
        # The distribution's libfabric lives in /usr (aws-ofi-nccl cannot build there).
        facts["libfabric_in_usr"] = "yes"
    if facts["efa_method"] == "package" and distro is not None:
        facts["libfabric_efa"] = "yes" if distro.efa else "no"
        if distro.version:
            facts["libfabric"] = distro.version
    if "nccl" in roles:
        # The wheel method's entry: nccl_wheel, or the one the flavour chose
        # (nccl_wheel_artifact: nccl_wheel_cu13); the catalog left out the others.
        wheel = artifacts.get("nccl_wheel") or next(
            (a for a in needed if a.role == "nccl" and a.filename.endswith(".whl")), None
        )
        source = artifacts.get("nccl") or wheel
        if source:
            facts["nccl"] = source.version
        if wheel is not None:
            major = rules.nccl_cuda_major(wheel.filename)
            if major:
                facts["nccl_cuda_major"] = major
    if "aws_ofi_nccl" in artifacts:
        facts["aws_ofi_nccl"] = artifacts["aws_ofi_nccl"].version
    if "rmm" in roles and "rmm_wheel" in artifacts:
        rmm_major = rules.rmm_cuda_major(artifacts["rmm_wheel"].filename)
        if rmm_major:
            facts["rmm_cuda_major"] = rmm_major
    if "pytorch" in roles:
        facts.update(pytorch.torch_facts(needed, facts.get("nccl")))
    if cuda.major:
        facts["base_cuda_major"] = cuda.major
    return facts


def check_compatibility(facts: dict[str, str], every_outcome: bool = True) -> rules.Check:
    """Every rule's outcome is printed (only the violations without `every_outcome`);
    violations stop the build before any build work."""
    result = rules.check(facts)
    if every_outcome:
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
