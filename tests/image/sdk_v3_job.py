"""Run a SageMaker Python SDK v3 ModelTrainer job in the SDK's own local-container mode.

Test support, run with the SDK's virtualenv (test_sagemaker_image.py makes it):
`python sdk_v3_job.py IMAGE WORKDIR --instances 2 --process-count-per-node N
[--mpi-additional-options JSON | --torchrun]`. The job is
ModelTrainer(distributed=MPI(...)) on `local_cpu` instances (docker compose, hosts
algo-1..N); its entry script prints one line per MPI rank with the SageMaker host
it runs on (the host of resourceconfig.json whose address is its own). With
--torchrun it is ModelTrainer(distributed=Torchrun(...)) instead
(test_torchrun_image.py): the SDK's driver runs `torchrun` on every host, and the
entry script all-reduces over gloo (CPU) across every rank of every host, checks
the sum, prints one line per rank and writes /opt/ml/model from rank 0. Nothing
reaches AWS: the credentials are placeholders, and local mode only reads the
region from them.
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

# What the SDK's Torchrun driver hands each rank: torchrun's RANK/WORLD_SIZE/
# LOCAL_RANK, the resource config's host, and the NCCL variables it sets itself.
TORCHRUN_ENTRY = """\
import json
import os
import sys

import torch
import torch.distributed as dist

with open("/opt/ml/input/config/resourceconfig.json") as config:
    host = json.load(config)["current_host"]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
assert value.item() == world * (world + 1) / 2, (value.item(), world)
# One write per line: the ranks of a host share its output, unbuffered (PYTHONUNBUFFERED),
# and print() would write the newline apart, so two ranks' lines could run together.
sys.stdout.write(
    f"sdk-v3 torchrun rank {rank} of {world} on {host} local {os.environ['LOCAL_RANK']}"
    f" sum {value.item():g} torch {torch.__version__}"
    f" NCCL_SOCKET_IFNAME={os.environ.get('NCCL_SOCKET_IFNAME')}"
    f" NCCL_PROTO={os.environ.get('NCCL_PROTO')}\\n"
)
sys.stdout.flush()
if rank == 0:
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "allreduce.json"), "w") as out:
        json.dump({"world": world, "sum": value.item(), "host": host}, out)
dist.barrier()
dist.destroy_process_group()
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("image")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--process-count-per-node", type=int, required=True)
    parser.add_argument("--mpi-additional-options", type=json.loads, default=None)
    parser.add_argument("--torchrun", action="store_true", help="Torchrun, gloo all-reduce")
    args = parser.parse_args()

    os.environ.setdefault("AWS_DEFAULT_REGION", "us-west-2")
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local-mode-placeholder")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local-mode-placeholder")

    from sagemaker.core.training.configs import Compute, SourceCode
    from sagemaker.train import ModelTrainer
    from sagemaker.train.distributed import MPI, Torchrun
    from sagemaker.train.model_trainer import Mode

    code = args.workdir / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "ranks.py").write_text(TORCHRUN_ENTRY if args.torchrun else ENTRY)
    distributed = (
        Torchrun(process_count_per_node=args.process_count_per_node)
        if args.torchrun
        else MPI(
            process_count_per_node=args.process_count_per_node,
            mpi_additional_options=args.mpi_additional_options,
        )
    )
    root = args.workdir / "root"
    root.mkdir(exist_ok=True)
    trainer = ModelTrainer(
        training_image=args.image,
        source_code=SourceCode(source_dir=str(code), entry_script="ranks.py"),
        compute=Compute(instance_type="local_cpu", instance_count=args.instances),
        distributed=distributed,
        training_mode=Mode.LOCAL_CONTAINER,
        local_container_root=str(root),
        role="arn:aws:iam::000000000000:role/local-mode",
        base_job_name="efa-image-sdk-v3",
    )
    trainer.train()
    return 0


if __name__ == "__main__":
    sys.exit(main())
