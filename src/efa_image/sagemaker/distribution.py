"""SageMaker's `distribution` config: a checked one for an instance type, and the traps of a user's.

The SageMaker Python SDK v2 takes `distribution={...}` on its PyTorch estimator
and turns it into hyperparameters (efa_image.sagemaker.sdk_v2), which the
sagemaker-training toolkit reads to start `mpirun`; SDK v3's ModelTrainer
takes `distributed=MPI(...)` (efa_image.sagemaker.sdk_v3 reads it as the v2
dict). `recommend` builds the dict for an instance type and `check` finds the
traps of one (AWS's model-parallel guide and the sources named at each rule):

- each section alone (efa_image.sagemaker.sections): mpirun's options, the
  processes per host, the model-parallel parameters of the version;
- the EFA flags only where the instance type has EFA (efa_image.sagemaker.efa);
- model parallel and data parallel never together, model parallel only under
  MPI, smdistributed versions only those of data/smdistributed_builds.yml
  (efa_image.sagemaker.versions);
- ml.p5.48xlarge with smdistributed only with torch_distributed (the SDK's
  EstimatorBase._distribution_configuration refuses it otherwise).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from efa_image.compat import smdistributed
from efa_image.sagemaker import sections
from efa_image.sagemaker.advice import Advice, DistributionError
from efa_image.sagemaker.efa import efa_flags
from efa_image.sagemaker.instance_types import InstanceType
from efa_image.sagemaker.sdk_v2 import KNOWN_KEYS, P5_NEEDS_TORCH_DISTRIBUTED, enabled
from efa_image.sagemaker.versions import LIBRARIES, degree_parameter, resolve_version

DEFAULT_MP_PARAMETERS = {"microbatches": 4, "ddp": True}
DEFAULT_PIPELINE_DEGREE = 2


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
            parameters = {degree_parameter(version): DEFAULT_PIPELINE_DEGREE}
            parameters.update(DEFAULT_MP_PARAMETERS)
            config["smdistributed"] = {"modelparallel": {"enabled": True, "parameters": parameters}}
        config["mpi"] = {"enabled": True, "processes_per_host": processes}
        if options:
            config["mpi"]["custom_mpi_options"] = options
    if "smdistributed" in config and P5_NEEDS_TORCH_DISTRIBUTED in itype.name:
        config["torch_distributed"] = {"enabled": True}
    errors = [a for a in check(config, itype, library, version) if a.level == "error"]
    if errors:
        raise DistributionError("; ".join(a.message for a in errors))
    return config


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


def _strategies(smd: Mapping[str, Any]) -> list[Advice]:
    """The smdistributed section names known libraries, and one of them only."""
    advice = []
    unknown = [s for s in smd if s not in smdistributed.LIBRARIES]
    if unknown:
        advice.append(
            Advice(
                "error",
                f"smdistributed: unknown strategy {unknown}: use 'modelparallel' or 'dataparallel'",
            )
        )
    if len(smd) > 1:
        advice.append(
            Advice(
                "error",
                "smdistributed: model parallel and data parallel cannot run in one job: keep "
                "only 'modelparallel' (its 'ddp' parameter gives data parallelism across its "
                "replicas) or only 'dataparallel'",
            )
        )
    return advice


def check(
    config: Mapping[str, Any],
    itype: InstanceType,
    library: str | None = None,
    version: str | None = None,
    sdk: str = "v2",
) -> list[Advice]:
    """Every trap in an SDK v2 `distribution` dict for this instance type.

    `library` is what the user meant (an error when the dict enables another);
    `version` the smdistributed version (default: the newest known build).
    """
    if not isinstance(config, Mapping):
        return [Advice("error", "the config must be a dict (the estimator's distribution=...)")]
    advice = [
        Advice("warning", f"unknown key {key!r}: the SDK ignores it (known: {KNOWN_KEYS})")
        for key in config
        if key not in KNOWN_KEYS
    ]
    smd = config.get("smdistributed")
    if smd is None:
        smd = {}
    elif not isinstance(smd, Mapping):
        return [*advice, Advice("error", "smdistributed: must be a dict")]
    advice.extend(_strategies(smd))
    on = [s for s in smd if s in smdistributed.LIBRARIES]
    effective = on[0] if len(on) == 1 else None
    if not on:
        effective = "mpi" if "mpi" in config else None
    if effective is None and not on:
        advice.append(
            Advice(
                "error",
                'the config enables no strategy: add "mpi": {"enabled": True, ...} or an '
                '"smdistributed" library (print one with this command, without --check)',
            )
        )
    if library and effective and library != effective and len(on) <= 1:
        advice.append(
            Advice(
                "error",
                f"the config is for {effective}, not {library}: give --library {effective} or "
                "check the right file",
            )
        )
    versions: dict[str, str | None] = {}
    for strategy in on:
        try:
            asked = version if strategy == effective or len(on) == 1 else None
            versions[strategy] = resolve_version(strategy, asked)
        except DistributionError as error:
            advice.append(Advice("error", str(error)))
            versions[strategy] = None
    mp_version = versions.get("modelparallel")
    if mp_version is not None:
        advice.extend(sections.check_modelparallel(smd["modelparallel"], mp_version))
    advice.extend(_across_sections(config, smd, itype, on, sdk))
    return advice


def _across_sections(
    config: Mapping[str, Any],
    smd: Mapping[str, Any],
    itype: InstanceType,
    on: list[str],
    sdk: str,
) -> list[Advice]:
    """The sections' own checks and the rules between them: model parallel under MPI,
    the EFA flags somewhere mpirun sees them, torch_distributed on p5."""
    advice = []
    mpi = config.get("mpi")
    if "modelparallel" in on and not enabled(mpi):
        advice.append(
            Advice(
                "error",
                'mpi: model parallel runs under MPI: add "mpi": {"enabled": True, '
                f'"processes_per_host": {itype.gpus}}}',
            )
        )
    if "dataparallel" in on and not enabled(smd["dataparallel"]):
        advice.append(
            Advice("error", 'smdistributed.dataparallel: set "enabled": True (or drop it)')
        )
    if isinstance(mpi, Mapping):
        advice.extend(sections.check_mpi(mpi, itype))
    elif mpi is not None:
        advice.append(Advice("error", 'mpi: must be a dict such as {"enabled": True}'))
    if itype.efa and not _options(config) and (enabled(mpi) or "dataparallel" in on):
        where = "mpi" if enabled(mpi) else "smdistributed.dataparallel"
        flags = " ".join(efa_flags(itype))
        advice.append(
            Advice(
                "warning",
                f'{where}: {itype.name} has EFA: add "custom_mpi_options": "{flags}" for the '
                "guide's best performance",
            )
        )
    for where, options in _options(config):
        if isinstance(options, str):
            advice.extend(sections.check_mpi_options(options, itype, where, sdk))
        else:
            advice.append(Advice("error", f"{where}: must be one string of mpirun options"))
    torch_distributed = enabled(config.get("torch_distributed"))
    if on and P5_NEEDS_TORCH_DISTRIBUTED in itype.name and not torch_distributed:
        advice.append(
            Advice(
                "error",
                f"the SDK refuses smdistributed on {itype.name} unless torch_distributed is on: "
                'add "torch_distributed": {"enabled": True}',
            )
        )
    return advice


def load_config(path: Path | str) -> dict[str, Any]:
    """A user's config from JSON or YAML; an estimator's kwargs dict yields its distribution
    (SDK v2), a ModelTrainer's its distributed (SDK v3)."""
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
