"""The SageMaker Python SDK code `efa-image distribution` prints: v2's dict, v3's ModelTrainer.

The config comes checked from efa_image.sagemaker.distribution.recommend; this only
writes it as Python to paste (for v3 with the ranks spread as efa_image.sagemaker.sdk_v3
says).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from efa_image.compat import smdistributed
from efa_image.sagemaker.advice import DistributionError
from efa_image.sagemaker.instance_types import InstanceType
from efa_image.sagemaker.sdk_v3 import V3_TRAP, spread


def python_literal(value: Any, indent: int = 0) -> str:
    """A dict as Python source to paste (True/False/None, 4-space indents)."""
    pad = " " * (indent + 4)
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        items = [
            f"{pad}{json.dumps(str(k))}: {python_literal(v, indent + 4)}," for k, v in value.items()
        ]
        return "{\n" + "\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(value, list):
        return "[" + ", ".join(python_literal(v, indent) for v in value) + "]"
    if value is True or value is False or value is None:
        return repr(value)
    return json.dumps(value)


def render_v2(
    config: Mapping[str, Any], itype: InstanceType, library: str, version: str | None
) -> str:
    """The SDK v2 snippet: the checked dict and the PyTorch estimator it goes into.

    With image_uri, not framework_version: the SDK then skips its own lists of
    framework versions (smdataparallel's ends at PyTorch 2.2.0, older than the
    newest build), and this project's images are the user's own.
    """
    lines = [f"# {itype.describe()}"]
    if version:
        builds = [b for b in smdistributed.load_builds()[library] if b.version == version]
        lines.append(
            f"# smdistributed-{library} {version}: the image needs the PyTorch, CUDA and Python "
            f"of one of its builds: {', '.join(b.describe() for b in builds)}"
        )
    lines.append("distribution = " + python_literal(config))
    lines.append("")
    lines.append("# SageMaker Python SDK v2:")
    lines.append("from sagemaker.pytorch import PyTorch")
    lines.append("")
    lines.append(
        "estimator = PyTorch(\n"
        '    entry_point="train.py",\n'
        '    source_dir=".",\n'
        "    role=role,\n"
        f'    instance_type="{itype.name}",\n'
        "    instance_count=2,\n"
        '    image_uri="<your image in ECR>",  # e.g. efa-image build --flavor sagemaker\n'
        "    distribution=distribution,\n"
        ")"
    )
    return "\n".join(lines)


def render_v3(
    config: Mapping[str, Any], itype: InstanceType, library: str, instance_count: int = 2
) -> str:
    """The SDK v3 ModelTrainer snippet (sagemaker.train) for plain MPI, with the ranks
    spread over the instances (sdk_v3.V3_TRAP)."""
    if library != "mpi":
        reason = (
            "ModelTrainer's SMP (Torchrun(smp=SMP(...))) configures model parallel v2, and "
            + smdistributed.V2_NOTE
            if library == "modelparallel"
            else "ModelTrainer has no class for smdistributed dataparallel (its Torchrun and MPI "
            "drivers start torchrun or mpirun, not the SMDDP launcher)"
        )
        raise DistributionError(
            f"--sdk v3 --library {library}: {reason}; use --sdk v2 (the PyTorch estimator's "
            "distribution= dict) for this project's smdistributed builds"
        )
    mpi = config["mpi"]
    per_host = mpi["processes_per_host"]
    total, options = spread(
        per_host, instance_count, shlex.split(mpi.get("custom_mpi_options", ""))
    )
    fields = [
        f"        process_count_per_node={total},"
        + (f"  # {instance_count} instances x {per_host}" if instance_count > 1 else "")
    ]
    if options:
        fields.append(f"        mpi_additional_options={python_literal(options)},")
    trap = (
        [
            f"# {V3_TRAP};",
            f"# so process_count_per_node is the job's total and --map-by ppr:{per_host}:node "
            f"puts {per_host} on each instance.",
        ]
        if instance_count > 1
        else []
    )
    return "\n".join(
        [
            f"# {itype.describe()}",
            *trap,
            "# SageMaker Python SDK v3:",
            "from sagemaker.core.training.configs import Compute, SourceCode",
            "from sagemaker.train import ModelTrainer",
            "from sagemaker.train.distributed import MPI",
            "",
            "trainer = ModelTrainer(",
            '    training_image="<your image in ECR>",',
            '    source_code=SourceCode(source_dir=".", entry_script="train.py"),',
            f'    compute=Compute(instance_type="{itype.name}", instance_count={instance_count}),',
            "    distributed=MPI(",
            *fields,
            "    ),",
            ")",
            "trainer.train()",
        ]
    )
