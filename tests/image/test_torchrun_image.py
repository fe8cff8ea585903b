"""`efa-image build` of the reduced Torchrun SageMaker flavour on the CI mirror, verified,
and a two-instance job of the SageMaker Python SDK v3's own ModelTrainer with
distributed=Torchrun in the SDK's local-container mode: the acceptance test of
issue 37 item 4.

sagemaker-torchrun-reduced (flavors.yml) is EFA userspace, Open MPI, NCCL 2.30.7
for CUDA 13 (nccl_wheel_cu13), PyTorch 2.15.0 (pytorch_cu13, which pins that NCCL
and loads the image's) and SageMaker's training toolkit: what the CI mirror can
build (no aws-ofi-nccl, no nccl-tests). Its base is Debian 12, whose Python 3.11
the wheel sets are for. It is built on the plain base, not on the efa-reduced
image as test_sagemaker_image.py extends it: that image's NCCL is the CUDA 12
wheel, which the rule image-nccl-cuda-major-matches-torch refuses beside a CUDA 13
PyTorch. libfabric and Open MPI come from the build cache (image-tests@build
compiled them on Debian 12), the toolkit's sdists too (molecule@sagemaker_training).

The job: two `local_cpu` instances (docker compose, hosts algo-1 and algo-2), the
SDK's sm_train.sh and torchrun_driver.py (bash, python3, pip and `torchrun` on PATH),
which runs `torchrun --nnodes 2 --nproc_per_node N --master_addr algo-1 ...` on
both. The entry script all-reduces over gloo on CPU across all 2 x N ranks. The
driver sets NCCL_SOCKET_IFNAME to the resource config's interface, `ethwe` in local
mode (no such interface in the containers): gloo does not read it, and finds its
address from the container's host name; NCCL would fail on it (docs/sagemaker.md).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from imagebuild import PROFILE, REPOSITORY, build_and_report, docker
from sdkv3 import SDK_V3_JOB, one_local_job, sdk_v3_python

FLAVOR = "sagemaker-torchrun-reduced"
BASE = "efa-image/base:debian12"
VENV = "/opt/efa-image/venv"
TORCH = "2.15.0"
NCCL = "2.30.7"
INSTANCES, PER_NODE = 2, 2
RANK_LINE = re.compile(
    r"sdk-v3 torchrun rank (\d+) of (\d+) on (\S+) local (\d+) sum (\S+) torch (\S+)"
    r" NCCL_SOCKET_IFNAME=(\S+) NCCL_PROTO=(\S+)"
)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    """The flavour, built (or an identical verified image of it reused: inputs and
    fingerprint equal) and verified."""
    report = tmp_path_factory.mktemp("torchrun") / "report.json"
    return build_and_report(report, flavor=FLAVOR, base=BASE, rebuild=False)


def run(image: str, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "run", "--rm", image, "bash", "-c", script], capture_output=True, text=True
    )


def test_the_build_holds_the_flavours_roles(built):
    assert f"{REPOSITORY}:{FLAVOR}-{PROFILE}" in built["tags"]
    # The manifest's components (a reused image's report names no Ansible roles).
    manifest = json.loads(
        docker("run", "--rm", built["image"], "cat", "/opt/efa-image/manifest.json")
    )
    assert manifest["flavor"] == FLAVOR
    names = {component["name"] for component in manifest["components"]}
    assert {"efa", "openmpi", "nccl", "pytorch", "sagemaker_training"} <= names, names
    assert not {"aws_ofi_nccl", "nccl_tests", "gdrcopy", "metis", "rmm", "smdistributed"} & names
    size = int(docker("image", "inspect", "--format", "{{.Size}}", built["image"]))
    print(f"image {built['image']}: {size / 1e9:.2f} GB")


def test_pytorch_is_the_current_one_on_the_images_cuda_13_nccl(built):
    manifest = json.loads(
        docker("run", "--rm", built["image"], "cat", "/opt/efa-image/manifest.json")
    )
    components = {c["name"]: c for c in manifest["components"]}
    torch = components["pytorch"]
    assert torch["version"].split("+")[0] == TORCH and torch["artifact"] == "pytorch_cu13", torch
    assert torch["cuda"].startswith("13."), torch
    assert torch["nccl"]["built"] == NCCL and torch["nccl"]["loaded_version"] == NCCL, torch
    assert torch["nccl"]["loaded"].startswith("/opt/nccl/"), torch
    assert "torch-nccl-matches-image-nccl" in torch["compatibility"], torch
    nccl = components["nccl"]
    assert nccl["version"].startswith(NCCL), nccl
    assert "cu13" in json.dumps(nccl), nccl
    assert not {"smdistributed", "metis", "rmm", "aws_ofi_nccl"} & set(components)


def test_what_the_sdks_torchrun_driver_needs_is_on_path(built):
    """sm_train.sh needs bash, python3 and pip; torchrun_driver.py imports torch in
    that python and runs `torchrun`; /opt/ml is writable."""
    script = (
        "set -e; command -v python3 pip torchrun;"
        " python3 -c 'import torch, torch.distributed as d;"
        " print(torch.__version__, d.is_gloo_available())';"
        " for d in code input/config input/data model output; do test -d /opt/ml/$d; done;"
        " touch /opt/ml/model/.w && rm /opt/ml/model/.w; echo SUBMIT=$SAGEMAKER_SUBMIT_DIRECTORY"
    )
    proc = run(built["image"], script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:3] == [f"{VENV}/bin/python3", f"{VENV}/bin/pip", f"{VENV}/bin/torchrun"], lines
    assert lines[3] == f"{TORCH} True" or lines[3].startswith(f"{TORCH}+"), lines
    assert "SUBMIT=/opt/ml/code" in lines


def test_sdk_v3_modeltrainer_torchrun_runs_ranks_on_both_instances(built, tmp_path):
    """ModelTrainer(..., distributed=Torchrun(process_count_per_node=2)) on two
    local_cpu instances: 4 ranks, 2 on algo-1 and 2 on algo-2, one gloo all-reduce."""
    argv = [str(sdk_v3_python()), str(SDK_V3_JOB), built["image"], str(tmp_path), "--torchrun"]
    argv += ["--instances", str(INSTANCES), "--process-count-per-node", str(PER_NODE)]
    with one_local_job():
        started = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
        seconds = time.monotonic() - started
    output = proc.stdout + proc.stderr
    ranks = sorted({m.groups() for m in RANK_LINE.finditer(output)})
    print(f"--- SDK v3 ModelTrainer + Torchrun, local mode, {INSTANCES} instances: {seconds:.0f} s")
    for line in output.splitlines():
        if "Executing command: torchrun" in line or "sdk-v3 torchrun rank" in line:
            print(
                "  "
                + line[line.find("Executing") if "Executing" in line else line.find("sdk-v3") :]
            )
    assert proc.returncode == 0, output[-6000:]
    world = INSTANCES * PER_NODE
    assert [int(r[0]) for r in ranks] == list(range(world)), output[-6000:]
    total = world * (world + 1) / 2
    for rank, size, _host, _local, value, torch, ifname, proto in ranks:
        assert int(size) == world and float(value) == total, rank
        assert torch.split("+")[0] == TORCH
        # What the driver sets in local mode: the resource config's interface
        # (absent in the containers, unused by gloo) and NCCL_PROTO=simple.
        assert (ifname, proto) == ("ethwe", "simple")
    per_host = {h: sum(1 for r in ranks if r[2] == h) for h in ("algo-1", "algo-2")}
    assert per_host == {"algo-1": PER_NODE, "algo-2": PER_NODE}, ranks
    # Both hosts joined one torchrun job: the driver's command on each names 2 nodes.
    assert output.count("--nnodes=2") >= INSTANCES, output[-6000:]
    for rank_of_node in ("--node_rank=0", "--node_rank=1"):
        assert rank_of_node in output, rank_of_node
    # Rank 0 wrote the model directory, which local mode collects from the hosts.
    model = [json.loads(p.read_text()) for p in Path(tmp_path).rglob("allreduce.json")]
    assert {"world": world, "sum": total, "host": "algo-1"} in model, model
