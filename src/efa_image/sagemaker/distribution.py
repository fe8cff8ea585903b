"""SageMaker's `distribution` config: a checked one for an instance type, and the traps of a user's.

The SageMaker Python SDK v2 takes `distribution={...}` on its PyTorch estimator
and turns it into hyperparameters (`hyperparameters.json` in the container),
which the sagemaker-training toolkit reads to start `mpirun`. SDK v3's
ModelTrainer takes `distributed=MPI(...)` and starts `mpirun` from its own
driver. The traps (AWS's model-parallel guide and the sources named at each
rule) are checked here once:

- smdistributed-modelparallel before 1.6.0 takes `partitions`, from 1.6.0
  `pipeline_parallel_degree` (SDK docs smd_model_parallel_general.rst);
- processes per host at most the instance's GPUs
  (data/sagemaker_instance_types.yml);
- no MCA parameter the launcher passes itself, above all
  `--mca btl_vader_single_copy_mechanism none` (toolkit mpi.py
  MasterRunner._create_command; SDK v3 mpi_utils.get_mpirun_command): Open
  MPI 4, which AWS's images and the EFA installer's openmpi40-aws carry,
  refuses a parameter listed twice (the guide's error; Open MPI 5.0.7 let it
  pass when tried here, so the rule is for the images SageMaker runs);
- the EFA flags only where the instance type has EFA, and
  FI_EFA_USE_DEVICE_RDMA only where EFA reaches GPU memory;
- model parallel and data parallel never together, smdistributed versions only
  those of data/smdistributed_builds.yml (efa_image.compat.smdistributed);
- ml.p5.48xlarge with smdistributed only with torch_distributed (the SDK's
  EstimatorBase._distribution_configuration refuses it otherwise).

`hyperparameters()` derives what SageMaker writes to hyperparameters.json, as
the SDK v2.257 does it: Framework._script_mode_hyperparam_update,
EstimatorBase._distribution_configuration, PyTorch.hyperparameters and
_json_encode_hyperparameters (every value JSON-encoded into a string).
"""

from __future__ import annotations

import json
import logging
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from efa_image.compat import smdistributed
from efa_image.errors import EfaImageError
from efa_image.sagemaker.instance_types import InstanceType

LIBRARIES = ("mpi", "dataparallel", "modelparallel")
SDKS = ("v2", "v3")
RENAMED = (1, 6, 0)  # smdistributed-modelparallel: partitions -> pipeline_parallel_degree
# The guide's tip for EFA instance types, one `-x` each.
EFA_FLAGS = ("FI_EFA_USE_DEVICE_RDMA=1", "FI_PROVIDER=efa", "RDMAV_FORK_SAFE=1")
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
DEFAULT_MP_PARAMETERS = {"microbatches": 4, "ddp": True}
DEFAULT_PIPELINE_DEGREE = 2
DEFAULT_SUBMIT_DIRECTORY = "/opt/ml/code"
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
P5_NEEDS_TORCH_DISTRIBUTED = "p5.48xlarge"  # the SDK's substring test


class DistributionError(EfaImageError, ValueError):
    """Bad input (a version, library or config that cannot work): the message says the fix."""


@dataclass(frozen=True)
class Finding:
    """One line of `--check`: an error stops the job or the SDK, a warning does not."""

    level: str  # "error" | "warning"
    message: str

    def render(self) -> str:
        return f"{self.level}: {self.message}"


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def known_versions(library: str, builds: smdistributed.Builds | None = None) -> list[str]:
    """The smdistributed versions of data/smdistributed_builds.yml, oldest first."""
    table = builds if builds is not None else smdistributed.load_builds()
    return sorted({build.version for build in table[library]}, key=version_key)


def resolve_version(
    library: str, version: str | None, builds: smdistributed.Builds | None = None
) -> str | None:
    """The version asked for, or the newest known one; None for plain MPI."""
    if library == "mpi":
        if version:
            raise DistributionError(
                "--version names an smdistributed version: plain MPI has none (drop --version, "
                "or use --library dataparallel/modelparallel)"
            )
        return None
    versions = known_versions(library, builds)
    if version is None:
        return versions[-1]
    if version not in versions:
        raise DistributionError(
            f"smdistributed-{library} {version} is no known build; known: "
            f"{smdistributed.known(library, builds)} (src/efa_image/data/{smdistributed.DATA})"
        )
    return version


def _flag_tokens(values: Sequence[str]) -> list[str]:
    return [token for value in values for token in ("-x", value)]


def _guide_flags(itype: InstanceType) -> list[str]:
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
    return _flag_tokens(_guide_flags(itype))


def recommend(
    itype: InstanceType,
    library: str,
    version: str | None = None,
    processes_per_host: int | None = None,
    efa: bool | None = None,
) -> dict[str, Any]:
    """The SDK v2 `distribution` dict for this instance type and library, checked."""
    if library not in LIBRARIES:
        raise DistributionError(f"unknown library {library!r}: one of {', '.join(LIBRARIES)}")
    version = resolve_version(library, version)
    processes = itype.gpus if processes_per_host is None else processes_per_host
    options = " ".join(efa_flags(itype, efa))
    config: dict[str, Any] = {}
    if library == "dataparallel":
        if processes != itype.gpus:
            raise DistributionError(
                f"smdistributed dataparallel starts one process per GPU ({itype.gpus} on "
                f"{itype.name}) and takes no processes_per_host: drop --processes-per-host"
            )
        dataparallel: dict[str, Any] = {"enabled": True}
        if options:
            dataparallel["custom_mpi_options"] = options
        config["smdistributed"] = {"dataparallel": dataparallel}
    else:
        if library == "modelparallel":
            degree = "pipeline_parallel_degree" if _renamed(version) else "partitions"
            parameters = {degree: DEFAULT_PIPELINE_DEGREE, **DEFAULT_MP_PARAMETERS}
            config["smdistributed"] = {"modelparallel": {"enabled": True, "parameters": parameters}}
        config["mpi"] = {"enabled": True, "processes_per_host": processes}
        if options:
            config["mpi"]["custom_mpi_options"] = options
    if "smdistributed" in config and P5_NEEDS_TORCH_DISTRIBUTED in itype.name:
        config["torch_distributed"] = {"enabled": True}
    errors = [f for f in check(config, itype, library, version) if f.level == "error"]
    if errors:
        raise DistributionError("; ".join(f.message for f in errors))
    return config


def _renamed(version: str | None) -> bool:
    return version is not None and version_key(version) >= RENAMED


def _enabled(section: object) -> bool:
    return isinstance(section, Mapping) and section.get("enabled") is True


def _options(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(where, custom_mpi_options) of every section that passes options to mpirun."""
    found = []
    mpi = config.get("mpi")
    if isinstance(mpi, Mapping) and "custom_mpi_options" in mpi:
        found.append(("mpi.custom_mpi_options", mpi["custom_mpi_options"]))
    dataparallel = (config.get("smdistributed") or {}).get("dataparallel")
    if isinstance(dataparallel, Mapping) and "custom_mpi_options" in dataparallel:
        where = "smdistributed.dataparallel.custom_mpi_options"
        found.append((where, dataparallel["custom_mpi_options"]))
    return found


def check_mpi_options(
    options: str | Sequence[str], itype: InstanceType, where: str, sdk: str = "v2"
) -> list[Finding]:
    """The MCA parameters the launcher passes itself, and the EFA flags, in one option string."""
    if isinstance(options, str):
        try:
            tokens = shlex.split(options)
        except ValueError as error:
            return [Finding("error", f"{where}: not a shell word list ({error}): fix the quoting")]
    else:
        tokens = [str(token) for token in options]
    findings = []
    launcher = "the sagemaker-training toolkit" if sdk == "v2" else "ModelTrainer's MPI driver"
    for i, token in enumerate(tokens[:-1]):
        name = tokens[i + 1]
        if token in ("--mca", "-mca") and name in LAUNCHER_MCA[sdk]:
            repeated = " ".join(tokens[i : i + 3])
            findings.append(
                Finding(
                    "error",
                    f"{where}: remove '{repeated}': {launcher} already passes -mca {name}, and "
                    "mpirun fails on an MCA parameter listed twice",
                )
            )
        if token == "-x":
            findings.extend(_efa_flag(name, itype, where))
    missing = [flag for flag in _guide_flags(itype) if itype.efa and flag not in tokens]
    if missing:
        findings.append(
            Finding(
                "warning",
                f"{where}: {itype.name} has EFA: add {' '.join(_flag_tokens(missing))} for the "
                "guide's best performance",
            )
        )
    return findings


def _efa_flag(value: str, itype: InstanceType, where: str) -> list[Finding]:
    name = value.split("=", 1)[0]
    if name == "FI_PROVIDER" and value.endswith("=efa"):
        if itype.efa is False:
            return [
                Finding(
                    "error",
                    f"{where}: remove -x {value}: {itype.name} has no EFA, and the EFA provider "
                    "hangs the job there",
                )
            ]
        if itype.efa is None:
            return [
                Finding(
                    "warning",
                    f"{where}: -x {value}: no source here says {itype.name} has EFA; keep it "
                    "only if `fi_info -p efa` works on it",
                )
            ]
    if name == "FI_EFA_USE_DEVICE_RDMA" and value != f"{name}=0":
        if itype.efa is False:
            return [Finding("error", f"{where}: remove -x {value}: {itype.name} has no EFA")]
        if itype.gpudirect_rdma is False:
            return [
                Finding(
                    "error",
                    f"{where}: remove -x {value}: EFA on {itype.name} "
                    f"({itype.gpu or 'its GPU'}) has no GPUDirect RDMA (aws-ofi-nccl "
                    "gdr_required only on p4d, p4de, p5, p5e, p5en)",
                )
            ]
        if itype.gpudirect_rdma is None:
            return [
                Finding(
                    "warning",
                    f"{where}: -x {value}: no source here says EFA on {itype.name} reaches GPU "
                    "memory; drop it unless you know it does",
                )
            ]
    if name == "RDMAV_FORK_SAFE" and itype.efa is False:
        return [Finding("warning", f"{where}: -x {value} does nothing without EFA: drop it")]
    return []


def _check_modelparallel(mp: Mapping[str, Any], version: str | None) -> list[Finding]:
    where = "smdistributed.modelparallel"
    if not isinstance(mp, Mapping) or mp.get("enabled") is not True:
        return [Finding("error", f'{where}: set "enabled": True (required by the SDK)')]
    parameters = mp.get("parameters")
    if not isinstance(parameters, Mapping):
        return [
            Finding(
                "error",
                f"{where}.parameters: required, a dict with "
                f"{'pipeline_parallel_degree' if _renamed(version) else 'partitions'}",
            )
        ]
    findings = []
    label = f"smdistributed-modelparallel {version}"
    right, wrong = (
        ("pipeline_parallel_degree", "partitions")
        if _renamed(version)
        else ("partitions", "pipeline_parallel_degree")
    )
    if wrong in parameters:
        since = "since" if _renamed(version) else "only from"
        findings.append(
            Finding(
                "error",
                f"{where}.parameters: rename {wrong!r} to {right!r}: {label} takes {right!r} "
                f"(pipeline_parallel_degree replaced partitions {since} 1.6.0)",
            )
        )
    elif right not in parameters:
        findings.append(
            Finding("error", f"{where}.parameters: add {right!r}, the number of model partitions")
        )
    for key in (right, wrong, "microbatches", "tensor_parallel_degree"):
        value = parameters.get(key)
        if key in parameters and (
            not isinstance(value, int) or isinstance(value, bool) or value < 1
        ):
            findings.append(
                Finding("error", f"{where}.parameters.{key}: {value!r} must be a positive integer")
            )
    if parameters.get("ddp") is True and parameters.get("horovod") is True:
        findings.append(
            Finding(
                "error", f"{where}.parameters: 'ddp' and 'horovod' exclude each other: keep one"
            )
        )
    return findings


def check(
    config: Mapping[str, Any],
    itype: InstanceType,
    library: str | None = None,
    version: str | None = None,
    sdk: str = "v2",
) -> list[Finding]:
    """Every trap in an SDK v2 `distribution` dict for this instance type.

    `library` is what the user meant (an error when the dict enables another);
    `version` the smdistributed version (default: the newest known build).
    """
    if not isinstance(config, Mapping):
        return [Finding("error", "the config must be a dict (the estimator's distribution=...)")]
    findings: list[Finding] = []
    for key in config:
        if key not in KNOWN_KEYS:
            findings.append(
                Finding("warning", f"unknown key {key!r}: the SDK ignores it (known: {KNOWN_KEYS})")
            )
    smd = config.get("smdistributed")
    strategies: list[str] = []
    if smd is not None:
        if not isinstance(smd, Mapping):
            return [*findings, Finding("error", "smdistributed: must be a dict")]
        strategies = list(smd)
        unknown = [s for s in strategies if s not in smdistributed.LIBRARIES]
        if unknown:
            findings.append(
                Finding(
                    "error",
                    f"smdistributed: unknown strategy {unknown}: use 'modelparallel' or "
                    "'dataparallel'",
                )
            )
        if len(strategies) > 1:
            findings.append(
                Finding(
                    "error",
                    "smdistributed: model parallel and data parallel cannot run in one job: keep "
                    "only 'modelparallel' (its 'ddp' parameter gives data parallelism across its "
                    "replicas) or only 'dataparallel'",
                )
            )
    enabled = [s for s in strategies if s in smdistributed.LIBRARIES]
    effective = enabled[0] if len(enabled) == 1 else None
    if effective is None and not enabled:
        effective = "mpi" if "mpi" in config else None
    if effective is None and not enabled:
        findings.append(
            Finding(
                "error",
                'the config enables no strategy: add "mpi": {"enabled": True, ...} or an '
                '"smdistributed" library (print one with this command, without --check)',
            )
        )
    if library and effective and library != effective and len(enabled) <= 1:
        findings.append(
            Finding(
                "error",
                f"the config is for {effective}, not {library}: give --library {effective} or "
                "check the right file",
            )
        )
    versions: dict[str, str | None] = {}
    for strategy in enabled:
        try:
            asked = version if strategy == effective or len(enabled) == 1 else None
            versions[strategy] = resolve_version(strategy, asked)
        except DistributionError as error:
            findings.append(Finding("error", str(error)))
            versions[strategy] = None
    mpi = config.get("mpi")
    if "modelparallel" in enabled and versions["modelparallel"] is not None:
        findings.extend(_check_modelparallel(smd["modelparallel"], versions["modelparallel"]))
    if "modelparallel" in enabled and not _enabled(mpi):
        findings.append(
            Finding(
                "error",
                'mpi: model parallel runs under MPI: add "mpi": {"enabled": True, '
                f'"processes_per_host": {itype.gpus}}}',
            )
        )
    if "dataparallel" in enabled and not _enabled(smd["dataparallel"]):
        findings.append(
            Finding("error", 'smdistributed.dataparallel: set "enabled": True (or drop it)')
        )
    if isinstance(mpi, Mapping):
        findings.extend(_check_processes(mpi, itype))
    elif mpi is not None:
        findings.append(Finding("error", 'mpi: must be a dict such as {"enabled": True}'))
    if itype.efa and not _options(config) and (_enabled(mpi) or "dataparallel" in enabled):
        where = "mpi" if _enabled(mpi) else "smdistributed.dataparallel"
        flags = " ".join(efa_flags(itype))
        findings.append(
            Finding(
                "warning",
                f'{where}: {itype.name} has EFA: add "custom_mpi_options": "{flags}" for the '
                "guide's best performance",
            )
        )
    for where, options in _options(config):
        if isinstance(options, str):
            findings.extend(check_mpi_options(options, itype, where, sdk))
        else:
            findings.append(Finding("error", f"{where}: must be one string of mpirun options"))
    torch_distributed = _enabled(config.get("torch_distributed"))
    if enabled and P5_NEEDS_TORCH_DISTRIBUTED in itype.name and not torch_distributed:
        findings.append(
            Finding(
                "error",
                f"the SDK refuses smdistributed on {itype.name} unless torch_distributed is on: "
                'add "torch_distributed": {"enabled": True}',
            )
        )
    return findings


def _check_processes(mpi: Mapping[str, Any], itype: InstanceType) -> list[Finding]:
    if not _enabled(mpi):
        return [Finding("error", 'mpi: set "enabled": True, or drop the mpi section')]
    if "processes_per_host" not in mpi:
        return [
            Finding(
                "warning",
                f"mpi: no processes_per_host: the toolkit then starts one per GPU; say "
                f'"processes_per_host": {itype.gpus} (the guide makes it required)',
            )
        ]
    value = mpi["processes_per_host"]
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        return [Finding("error", f"mpi.processes_per_host: {value!r} must be a positive integer")]
    if value > itype.gpus:
        return [
            Finding(
                "error",
                f"mpi.processes_per_host: {value} is more than the {itype.gpus} GPUs of "
                f"{itype.name}: set it to {itype.gpus} (one process per GPU)",
            )
        ]
    return []


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
    unknown = sorted(
        set(distributed) - {"class", "process_count_per_node", "mpi_additional_options"}
    )
    if unknown:
        raise DistributionError(
            f"MPI has no field {unknown}: it takes process_count_per_node, mpi_additional_options"
        )
    mpi: dict[str, Any] = {"enabled": True}
    options = distributed.get("mpi_additional_options") or []
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise DistributionError("MPI.mpi_additional_options: a list of strings, one argv word each")
    if distributed.get("process_count_per_node") is not None:
        # With the spread (v3_spread), process_count_per_node is the job's total.
        spread = v3_spread(options)
        mpi["processes_per_host"] = spread or distributed["process_count_per_node"]
    if options:
        mpi["custom_mpi_options"] = shlex.join(options)
    return {"mpi": mpi}


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


def check_v3(distributed: Mapping[str, Any]) -> list[Finding]:
    """The trap of ModelTrainer's MPI that no v2 rule sees (V3_TRAP)."""
    options = distributed.get("mpi_additional_options") or []
    count = distributed.get("process_count_per_node")
    if count is None or v3_spread(options) is not None:
        return []
    return [
        Finding(
            "warning",
            f"{V3_TRAP}: on more than one instance set process_count_per_node to "
            f"instance_count x {count} and add mpi_additional_options "
            f'["--map-by", "ppr:{count}:node"] (efa-image distribution --sdk v3 prints it)',
        )
    ]


def load_config(path: Path | str) -> dict[str, Any]:
    """A user's config from JSON or YAML; an estimator's kwargs dict yields its distribution."""
    text = Path(path).read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise DistributionError(f"{path}: neither JSON nor YAML ({error})") from None
    if not isinstance(data, dict):
        raise DistributionError(f"{path}: expected a dict (the estimator's distribution=...)")
    if isinstance(data.get("distribution"), dict):
        return data["distribution"]
    if isinstance(data.get("distributed"), dict):
        return data["distributed"]
    return data


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
    if _enabled(config.get("torch_distributed")):
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
