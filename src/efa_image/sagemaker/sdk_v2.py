"""What SageMaker Python SDK v2 does with a `distribution` dict, copied from v2.257.

The PyTorch estimator of SDK v2 takes `distribution={...}` and turns it into
hyperparameters (`hyperparameters.json` in the container), which the
sagemaker-training toolkit reads to start `mpirun`. `hyperparameters()` writes
what the SDK would, for `efa-image distribution --hyperparameters` and the
image tests that run the toolkit without the SDK: Framework._script_mode_hyperparam_update,
EstimatorBase._distribution_configuration, PyTorch.hyperparameters and
_json_encode_hyperparameters (every value JSON-encoded into a string).

A copy and not the SDK itself: the SDK (with boto3 and its other dependencies)
is no dependency of this project, and its estimator needs a session and a role
to say what it would write. tests/test_sdk_v2.py pins the SDK's output for
each kind of distribution, as its sources give it; a change of the SDK shows
there first.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from efa_image.sagemaker.advice import DistributionError

# The keys of the SDK's distribution dict (EstimatorBase._distribution_configuration,
# PyTorch._pytorch_distribution_configuration).
KNOWN_KEYS = (
    "mpi",
    "smdistributed",
    "torch_distributed",
    "pytorchddp",
    "parameter_server",
    "pytorchxla",
    "multi_worker_mirrored_strategy",
    "instance_groups",
)
# EstimatorBase._distribution_configuration refuses smdistributed on the
# instance types whose name holds this, unless torch_distributed is on.
P5_NEEDS_TORCH_DISTRIBUTED = "p5.48xlarge"
# SDK v2.257 hyperparameter names (estimator.py, model.py, pytorch/estimator.py).
SCRIPT_PARAM = "sagemaker_program"
DIR_PARAM = "sagemaker_submit_directory"
LOG_LEVEL_PARAM = "sagemaker_container_log_level"
JOB_NAME_PARAM = "sagemaker_job_name"
REGION_PARAM = "sagemaker_region"
MPI_ENABLED = "sagemaker_mpi_enabled"
MPI_PROCESSES = "sagemaker_mpi_num_of_processes_per_host"
MPI_OPTIONS = "sagemaker_mpi_custom_mpi_options"
SMDDP_ENABLED = "sagemaker_distributed_dataparallel_enabled"
SMDDP_OPTIONS = "sagemaker_distributed_dataparallel_custom_mpi_options"
INSTANCE_TYPE_PARAM = "sagemaker_instance_type"
TORCH_DISTRIBUTED = "sagemaker_torch_distributed_enabled"


def enabled(section: object) -> bool:
    """Whether a section of the dict is switched on: a dict with "enabled": True."""
    return isinstance(section, Mapping) and section.get("enabled") is True


def _distribution_configuration(
    config: Mapping[str, Any], instance_type: str | None
) -> dict[str, Any]:
    """EstimatorBase._distribution_configuration (SDK v2.257) for mpi and smdistributed."""
    derived: dict[str, Any] = {}
    mpi = config.get("mpi")
    if isinstance(mpi, Mapping):
        derived[MPI_ENABLED] = mpi.get("enabled", False)
        if mpi.get("processes_per_host"):
            derived[MPI_PROCESSES] = mpi["processes_per_host"]
        derived[MPI_OPTIONS] = mpi.get("custom_mpi_options", "")
    smd = config.get("smdistributed")
    if isinstance(smd, Mapping):
        mp = smd.get("modelparallel") or {}
        if mp.get("enabled", False) is True:
            derived["mp_parameters"] = dict(mp.get("parameters", {}))
        dataparallel = smd.get("dataparallel") or {}
        dataparallel_enabled = dataparallel.get("enabled", False)
        derived[SMDDP_ENABLED] = dataparallel_enabled
        if instance_type is not None:
            derived[INSTANCE_TYPE_PARAM] = instance_type
        if dataparallel_enabled:
            derived[SMDDP_OPTIONS] = dataparallel.get("custom_mpi_options", "")
    return derived


def hyperparameters(
    config: Mapping[str, Any],
    entry_point: str,
    submit_directory: str,
    *,
    instance_type: str | None = None,
    user_hyperparameters: Mapping[str, Any] | None = None,
    container_log_level: int = logging.INFO,
    job_name: str | None = None,
    region: str | None = None,
) -> dict[str, str]:
    """The hyperparameters.json SageMaker writes for this `distribution`, as SDK v2 derives it.

    Every value is JSON-encoded (strings quoted, True -> "true"), in the SDK's
    order: the user's hyperparameters, then sagemaker_submit_directory,
    sagemaker_program, sagemaker_container_log_level (then sagemaker_job_name and
    sagemaker_region, which the SDK always knows and this function writes only
    when given), then the distribution's. `entry_point` is relative to
    `submit_directory` (the SDK's script_name with a source_dir).
    `instance_type` gives sagemaker_instance_type, which the SDK adds for
    smdistributed (left out when None; the toolkit reads the type from
    resourceconfig.json).
    """
    if not entry_point or Path(entry_point).is_absolute() or ".." in Path(entry_point).parts:
        raise DistributionError(
            f"entry point {entry_point!r}: give the script's path relative to the submit "
            "directory (e.g. train.py)"
        )
    if not submit_directory:
        raise DistributionError("give the submit directory (e.g. /opt/ml/code or an s3:// URI)")
    raw: dict[str, Any] = dict(user_hyperparameters or {})
    raw[DIR_PARAM] = submit_directory
    raw[SCRIPT_PARAM] = entry_point
    raw[LOG_LEVEL_PARAM] = container_log_level
    if job_name is not None:
        raw[JOB_NAME_PARAM] = job_name
    if region is not None:
        raw[REGION_PARAM] = region
    name = (
        instance_type
        if instance_type is None or instance_type.startswith("ml.")
        else (f"ml.{instance_type}")
    )
    if enabled(config.get("torch_distributed")):
        # PyTorch._pytorch_distribution_configuration: torch_distributed wins.
        derived = _distribution_configuration(config, name) if "smdistributed" in config else {}
        derived[TORCH_DISTRIBUTED] = True
        if name is not None:
            derived[INSTANCE_TYPE_PARAM] = name
    else:
        derived = _distribution_configuration(config, name)
    raw.update(derived)
    return {str(key): json.dumps(value) for key, value in raw.items()}


def write_hyperparameters(path: Path | str, values: Mapping[str, str]) -> None:
    """hyperparameters.json as SageMaker writes it into /opt/ml/input/config."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(dict(values), indent=2) + "\n")
