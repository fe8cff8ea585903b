"""Checks of one section of a distribution config: mpirun's options, mpi, model parallel.

Each check reads one section alone and says what is wrong with it;
efa_image.sagemaker.distribution.check runs them and the rules across sections.
The sources behind each rule:

- no MCA parameter the launcher passes itself, above all
  `--mca btl_vader_single_copy_mechanism none` (toolkit mpi.py
  MasterRunner._create_command; SDK v3 mpi_utils.get_mpirun_command): Open
  MPI 4, which AWS's images and the EFA installer's openmpi40-aws carry,
  refuses a parameter listed twice (the guide's error; Open MPI 5.0.7 let it
  pass when tried here, so the rule is for the images SageMaker runs);
- processes per host at most the instance's GPUs
  (data/sagemaker_instance_types.yml);
- smdistributed-modelparallel before 1.6.0 takes `partitions`, from 1.6.0
  `pipeline_parallel_degree` (SDK docs smd_model_parallel_general.rst).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from efa_image.sagemaker import efa
from efa_image.sagemaker.advice import Advice
from efa_image.sagemaker.instance_types import InstanceType
from efa_image.sagemaker.sdk_v2 import enabled
from efa_image.sagemaker.versions import degree_parameter

# MCA parameters each launcher already passes: a second -mca for one of them
# makes mpirun refuse ("MCA parameters can only be listed once").
# sagemaker-training toolkit, src/sagemaker_training/mpi.py MasterRunner._create_command
_TOOLKIT_MCA = (
    "btl_tcp_if_include",
    "oob_tcp_if_include",
    "plm_rsh_no_tree_spawn",
    "pml",
    "btl",
    "orte_abort_on_non_zero_status",
    "btl_vader_single_copy_mechanism",
)
LAUNCHER_MCA = {
    "v2": _TOOLKIT_MCA,
    # SDK v3 container_drivers/distributed_drivers/mpi_utils.py get_mpirun_command
    "v3": (*_TOOLKIT_MCA, "plm_rsh_num_concurrent"),
}
LAUNCHER = {"v2": "the sagemaker-training toolkit", "v3": "ModelTrainer's MPI driver"}


def _positive(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_mpi_options(
    options: str | Sequence[str], itype: InstanceType, where: str, sdk: str = "v2"
) -> list[Advice]:
    """The MCA parameters the launcher passes itself, and the EFA flags, in one option string."""
    if isinstance(options, str):
        try:
            tokens = shlex.split(options)
        except ValueError as error:
            return [Advice("error", f"{where}: not a shell word list ({error}): fix the quoting")]
    else:
        tokens = [str(token) for token in options]
    advice = []
    for i, token in enumerate(tokens[:-1]):
        name = tokens[i + 1]
        if token in ("--mca", "-mca") and name in LAUNCHER_MCA[sdk]:
            repeated = " ".join(tokens[i : i + 3])
            advice.append(
                Advice(
                    "error",
                    f"{where}: remove '{repeated}': {LAUNCHER[sdk]} already passes -mca {name}, "
                    "and mpirun fails on an MCA parameter listed twice",
                )
            )
        if token == "-x":
            advice.extend(efa.flag_advice(name, itype, where))
    return [*advice, *efa.missing_flags(tokens, itype, where)]


def check_mpi(mpi: Mapping[str, Any], itype: InstanceType) -> list[Advice]:
    """The mpi section: on, and at most one process per GPU."""
    if not enabled(mpi):
        return [Advice("error", 'mpi: set "enabled": True, or drop the mpi section')]
    if "processes_per_host" not in mpi:
        return [
            Advice(
                "warning",
                f"mpi: no processes_per_host: the toolkit then starts one per GPU; say "
                f'"processes_per_host": {itype.gpus} (the guide makes it required)',
            )
        ]
    value = mpi["processes_per_host"]
    if not _positive(value):
        return [Advice("error", f"mpi.processes_per_host: {value!r} must be a positive integer")]
    if value > itype.gpus:
        return [
            Advice(
                "error",
                f"mpi.processes_per_host: {value} is more than the {itype.gpus} GPUs of "
                f"{itype.name}: set it to {itype.gpus} (one process per GPU)",
            )
        ]
    return []


def check_modelparallel(mp: object, version: str) -> list[Advice]:
    """smdistributed.modelparallel: on, with the partition count this version names."""
    where = "smdistributed.modelparallel"
    if not isinstance(mp, Mapping) or not enabled(mp):
        return [Advice("error", f'{where}: set "enabled": True (required by the SDK)')]
    parameters = mp.get("parameters")
    right = degree_parameter(version)
    if not isinstance(parameters, Mapping):
        return [Advice("error", f"{where}.parameters: required, a dict with {right}")]
    advice = []
    wrong = "partitions" if right == "pipeline_parallel_degree" else "pipeline_parallel_degree"
    if wrong in parameters:
        since = "since" if right == "pipeline_parallel_degree" else "only from"
        advice.append(
            Advice(
                "error",
                f"{where}.parameters: rename {wrong!r} to {right!r}: smdistributed-modelparallel "
                f"{version} takes {right!r} (pipeline_parallel_degree replaced partitions "
                f"{since} 1.6.0)",
            )
        )
    elif right not in parameters:
        advice.append(
            Advice("error", f"{where}.parameters: add {right!r}, the number of model partitions")
        )
    for key in (right, wrong, "microbatches", "tensor_parallel_degree"):
        if key in parameters and not _positive(parameters[key]):
            advice.append(
                Advice(
                    "error",
                    f"{where}.parameters.{key}: {parameters[key]!r} must be a positive integer",
                )
            )
    if parameters.get("ddp") is True and parameters.get("horovod") is True:
        advice.append(
            Advice("error", f"{where}.parameters: 'ddp' and 'horovod' exclude each other: keep one")
        )
    return advice
