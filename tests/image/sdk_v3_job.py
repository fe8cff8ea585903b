"""Run a SageMaker Python SDK v3 ModelTrainer job in the SDK's own local-container mode.

Test support, run with the SDK's virtualenv (test_sagemaker_image.py makes it):
`python sdk_v3_job.py IMAGE WORKDIR --instances 2 --process-count-per-node N
[--mpi-additional-options JSON]`. The job is ModelTrainer(distributed=MPI(...)) on
`local_cpu` instances (docker compose, hosts algo-1..N); its entry script prints
one line per MPI rank with the SageMaker host it runs on (the host of
resourceconfig.json whose address is its own). Nothing reaches AWS: the
credentials are placeholders, and local mode only reads the region from them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ENTRY = """\
import json
import socket

from mpi4py import MPI

with open("/opt/ml/input/config/resourceconfig.json") as config:
    hosts = json.load(config)["hosts"]
me = socket.gethostbyname(socket.gethostname())
host = next((h for h in hosts if socket.gethostbyname(h) == me), "unknown")
comm = MPI.COMM_WORLD
print(f"sdk-v3 rank {comm.Get_rank()} of {comm.Get_size()} on {host}", flush=True)
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("image")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--process-count-per-node", type=int, required=True)
    parser.add_argument("--mpi-additional-options", type=json.loads, default=None)
    args = parser.parse_args()

    os.environ.setdefault("AWS_DEFAULT_REGION", "us-west-2")
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local-mode-placeholder")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local-mode-placeholder")

    from sagemaker.core.training.configs import Compute, SourceCode
    from sagemaker.train import ModelTrainer
    from sagemaker.train.distributed import MPI
    from sagemaker.train.model_trainer import Mode

    code = args.workdir / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "ranks.py").write_text(ENTRY)
    mpi = MPI(
        process_count_per_node=args.process_count_per_node,
        mpi_additional_options=args.mpi_additional_options,
    )
    root = args.workdir / "root"
    root.mkdir(exist_ok=True)
    trainer = ModelTrainer(
        training_image=args.image,
        source_code=SourceCode(source_dir=str(code), entry_script="ranks.py"),
        compute=Compute(instance_type="local_cpu", instance_count=args.instances),
        distributed=mpi,
        training_mode=Mode.LOCAL_CONTAINER,
        local_container_root=str(root),
        role="arn:aws:iam::000000000000:role/local-mode",
        base_job_name="efa-image-sdk-v3",
    )
    trainer.train()
    return 0


if __name__ == "__main__":
    sys.exit(main())
