"""SDK v3's ModelTrainer `distributed=MPI(...)`: its fields as the v2 dict, and its own trap.

SDK v3 takes `distributed=MPI(process_count_per_node=N, mpi_additional_options=[...])`
and starts `mpirun` from its own driver. The checks of efa_image.sagemaker.distribution
read SDK v2's dict, so `from_v3` translates the fields into it; the one trap only
v3 has is V3_TRAP, which `check_v3` reports and `spread` avoids in what
efa-image prints.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from efa_image.sagemaker.advice import Advice, DistributionError

FIELDS = ("class", "process_count_per_node", "mpi_additional_options")
# SDK v3 (3.27) container_drivers/distributed_drivers/mpi_driver.py and mpi_utils.py
# get_mpirun_command: `mpirun --host algo-1:N,algo-2:N -np N` with N the
# process_count_per_node, so a job on several instances runs N ranks, all on algo-1
# (Open MPI fills the first host's slots first, and a second -np does not override
# the first). The way out: process_count_per_node = instances x N, with
# `--map-by ppr:N:node` among mpi_additional_options to place N on each instance.
V3_TRAP = (
    "SDK v3's MPI driver starts `mpirun --host algo-1:N,algo-2:N -np N` with N = "
    "process_count_per_node: N ranks in all, every one on algo-1"
)


def spread(per_host: int, instance_count: int, options: Sequence[str]) -> tuple[int, list[str]]:
    """process_count_per_node and mpi_additional_options that run `per_host` ranks on each
    instance: the job's total, and `--map-by ppr:N:node` before the options (V3_TRAP)."""
    if instance_count <= 1:
        return per_host, list(options)
    return per_host * instance_count, ["--map-by", f"ppr:{per_host}:node", *options]


def v3_spread(options: Sequence[str]) -> int | None:
    """Ranks per instance that `--map-by ppr:K:node` in mpi_additional_options asks for."""
    words = list(options)
    for index, word in enumerate(words):
        value = words[index + 1] if word == "--map-by" and index + 1 < len(words) else ""
        value = word.removeprefix("--map-by=") if word.startswith("--map-by=") else value
        parts = value.split(":")
        if len(parts) >= 3 and parts[0] == "ppr" and parts[1].isdigit() and parts[2] == "node":
            return int(parts[1])
    return None


def from_v3(distributed: Mapping[str, Any]) -> dict[str, Any]:
    """ModelTrainer's `distributed=MPI(...)` fields as the v2 dict the rules read.

    `distributed`: {"class": "MPI", "process_count_per_node": 8,
    "mpi_additional_options": ["-x", "FI_PROVIDER=efa", ...]}.
    """
    kind = distributed.get("class")
    if kind != "MPI":
        raise DistributionError(
            f'--sdk v3 --check reads ModelTrainer\'s MPI fields ({{"class": "MPI", '
            f'"process_count_per_node": N, "mpi_additional_options": [...]}}), not {kind!r}'
        )
    unknown = sorted(set(distributed) - set(FIELDS))
    if unknown:
        raise DistributionError(
            f"MPI has no field {unknown}: it takes process_count_per_node, mpi_additional_options"
        )
    mpi: dict[str, Any] = {"enabled": True}
    options = distributed.get("mpi_additional_options") or []
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise DistributionError("MPI.mpi_additional_options: a list of strings, one argv word each")
    if distributed.get("process_count_per_node") is not None:
        # With the spread, process_count_per_node is the job's total.
        mpi["processes_per_host"] = v3_spread(options) or distributed["process_count_per_node"]
    if options:
        mpi["custom_mpi_options"] = shlex.join(options)
    return {"mpi": mpi}


def check_v3(distributed: Mapping[str, Any]) -> list[Advice]:
    """The trap of ModelTrainer's MPI that no v2 rule sees (V3_TRAP)."""
    options = distributed.get("mpi_additional_options") or []
    count = distributed.get("process_count_per_node")
    if count is None or v3_spread(options) is not None:
        return []
    return [
        Advice(
            "warning",
            f"{V3_TRAP}: on more than one instance set process_count_per_node to "
            f"instance_count x {count} and add mpi_additional_options "
            f'["--map-by", "ppr:{count}:node"] (efa-image distribution --sdk v3 prints it)',
        )
    ]
