"""SageMaker's GPU training instance types: GPUs, GPU model, EFA, GPUDirect RDMA over EFA.

The facts live in data/sagemaker_instance_types.yml, each row naming its
sources; efa_image.sagemaker.distribution reads them for its processes-per-host and EFA
rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from efa_image.datafiles import read_yaml
from efa_image.errors import EfaImageError

DATA = "sagemaker_instance_types.yml"
FIELDS = {"gpus", "gpu", "efa", "gpudirect_rdma", "sources"}


class InstanceTypeError(EfaImageError, ValueError):
    """An unknown instance type, or a malformed table: the message says the fix."""


@dataclass(frozen=True)
class InstanceType:
    name: str
    gpus: int
    gpu: str | None
    efa: bool | None
    gpudirect_rdma: bool | None
    sources: tuple[str, ...]

    def describe(self) -> str:
        """'ml.p4d.24xlarge: 8 x A100, EFA, GPUDirect RDMA over EFA'."""
        parts = [f"{self.gpus} x {self.gpu or 'GPU (model not sourced)'}"]
        parts.append({True: "EFA", False: "no EFA", None: "EFA unknown"}[self.efa])
        if self.efa and self.gpudirect_rdma:
            parts.append("GPUDirect RDMA over EFA")
        return f"{self.name}: {', '.join(parts)}"


def _types_from(data: object, where: str) -> dict[str, InstanceType]:
    if not isinstance(data, Mapping) or not isinstance(data.get("instance_types"), Mapping):
        raise InstanceTypeError(f"{where}: expected a mapping instance_types: {{ml.TYPE: {{...}}}}")
    table = {}
    fields = FIELDS
    for name, raw in data["instance_types"].items():
        if not str(name).startswith("ml.") or not isinstance(raw, Mapping) or set(raw) != fields:
            raise InstanceTypeError(f"{where}: {name}: expected ml.NAME with {sorted(fields)}")
        ok = isinstance(raw["gpus"], int) and raw["gpus"] > 0
        ok = ok and all(raw[k] in (True, False, None) for k in ("efa", "gpudirect_rdma"))
        ok = ok and isinstance(raw["sources"], list) and bool(raw["sources"])
        if not ok or (raw["gpudirect_rdma"] and not raw["efa"]):
            raise InstanceTypeError(
                f"{where}: {name}: gpus a positive integer, efa/gpudirect_rdma true, false or "
                "null (GPUDirect RDMA only with EFA), sources a non-empty list"
            )
        gpu = None if raw["gpu"] is None else str(raw["gpu"])
        table[name] = InstanceType(
            name, raw["gpus"], gpu, raw["efa"], raw["gpudirect_rdma"], tuple(raw["sources"])
        )
    return table


def load_instance_types(path: Path | str | None = None) -> dict[str, InstanceType]:
    """The table in `path`, or the packaged data/sagemaker_instance_types.yml, validated."""
    return _types_from(*read_yaml(DATA, path, InstanceTypeError))


def instance_type(name: str, table: Mapping[str, InstanceType] | None = None) -> InstanceType:
    """'ml.p4d.24xlarge' or 'p4d.24xlarge'; an unknown one names the known ones."""
    types = table if table is not None else load_instance_types()
    full = name if name.startswith("ml.") else f"ml.{name}"
    if full not in types:
        raise InstanceTypeError(
            f"unknown SageMaker GPU training instance type {name!r}; known: {', '.join(types)} "
            f"(add it with its source to src/efa_image/data/{DATA})"
        )
    return types[full]
