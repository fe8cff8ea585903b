"""The EFA flags of AWS's model-parallel guide, and where they fit an instance type.

The guide's tip for EFA instance types is three `-x` flags to mpirun. They
belong only where the type has EFA (FI_PROVIDER=efa elsewhere hangs the job),
and FI_EFA_USE_DEVICE_RDMA only where EFA reaches GPU memory (aws-ofi-nccl's
gdr_required); data/sagemaker_instance_types.yml says which types those are,
or leaves it unknown (None), which gives a warning instead of an error.
"""

from __future__ import annotations

from collections.abc import Sequence

from efa_image.sagemaker.advice import Advice, DistributionError
from efa_image.sagemaker.instance_types import InstanceType

# The guide's tip for EFA instance types, one `-x` each.
EFA_FLAGS = ("FI_EFA_USE_DEVICE_RDMA=1", "FI_PROVIDER=efa", "RDMAV_FORK_SAFE=1")


def flag_tokens(values: Sequence[str]) -> list[str]:
    """['A=1', 'B=2'] -> ['-x', 'A=1', '-x', 'B=2']."""
    return [token for value in values for token in ("-x", value)]


def guide_flags(itype: InstanceType) -> list[str]:
    """The guide's EFA flags that fit the type: FI_EFA_USE_DEVICE_RDMA only with GPUDirect RDMA."""
    return [f for f in EFA_FLAGS if itype.gpudirect_rdma or not f.startswith("FI_EFA_USE_DEVICE")]


def efa_flags(itype: InstanceType, efa: bool | None = None) -> list[str]:
    """The guide's EFA flags as mpirun tokens (efa=None: where the table says EFA)."""
    if not (bool(itype.efa) if efa is None else efa):
        return []
    if itype.efa is False:
        raise DistributionError(
            f"{itype.name} has no EFA ({', '.join(itype.sources)}): drop --efa; FI_PROVIDER=efa "
            "there hangs the job"
        )
    return flag_tokens(guide_flags(itype))


def missing_flags(tokens: Sequence[str], itype: InstanceType, where: str) -> list[Advice]:
    """A warning naming the guide's flags an option list of an EFA type leaves out."""
    missing = [flag for flag in guide_flags(itype) if itype.efa and flag not in tokens]
    if not missing:
        return []
    return [
        Advice(
            "warning",
            f"{where}: {itype.name} has EFA: add {' '.join(flag_tokens(missing))} for the "
            "guide's best performance",
        )
    ]


def flag_advice(value: str, itype: InstanceType, where: str) -> list[Advice]:
    """What is wrong with one `-x NAME=VALUE` of the guide's on this instance type."""
    name = value.split("=", 1)[0]
    if name == "FI_PROVIDER" and value.endswith("=efa"):
        if itype.efa is False:
            return [
                Advice(
                    "error",
                    f"{where}: remove -x {value}: {itype.name} has no EFA, and the EFA provider "
                    "hangs the job there",
                )
            ]
        if itype.efa is None:
            return [
                Advice(
                    "warning",
                    f"{where}: -x {value}: no source here says {itype.name} has EFA; keep it "
                    "only if `fi_info -p efa` works on it",
                )
            ]
    if name == "FI_EFA_USE_DEVICE_RDMA" and value != f"{name}=0":
        return _device_rdma_advice(value, itype, where)
    if name == "RDMAV_FORK_SAFE" and itype.efa is False:
        return [Advice("warning", f"{where}: -x {value} does nothing without EFA: drop it")]
    return []


def _device_rdma_advice(value: str, itype: InstanceType, where: str) -> list[Advice]:
    if itype.efa is False:
        return [Advice("error", f"{where}: remove -x {value}: {itype.name} has no EFA")]
    if itype.gpudirect_rdma is False:
        return [
            Advice(
                "error",
                f"{where}: remove -x {value}: EFA on {itype.name} "
                f"({itype.gpu or 'its GPU'}) has no GPUDirect RDMA (aws-ofi-nccl "
                "gdr_required only on p4d, p4de, p5, p5e, p5en)",
            )
        ]
    if itype.gpudirect_rdma is None:
        return [
            Advice(
                "warning",
                f"{where}: -x {value}: no source here says EFA on {itype.name} reaches GPU "
                "memory; drop it unless you know it does",
            )
        ]
    return []
