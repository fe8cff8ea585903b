"""`efa-image build --profile portable-cuda13` on the CUDA 13 base (debian13-cuda13).

One build of efa-reduced from the CI mirror: the base made from NVIDIA's CUDA
13 wheels (lock: cuda13_toolkit) in /usr/local/cuda, libfabric built with
CUDA (--with-cuda, dlopen), Open MPI from source over it, and NCCL from the
nvidia-nccl-cu13 wheel (lock-overlays/cuda13.yml). What the CI mirror cannot
hold (aws-ofi-nccl and nccl-tests, compiled with CUDA 13 by the efa flavour)
is built from a local mirror by hand (docs/building.md, "CUDA 13").
The mirror must hold cuda13_toolkit and the cu13 nccl_wheel:
`efa-image mirror create MIRROR --name cuda13_toolkit`, then with
`--lock-overlay playbooks/lock-overlays/cuda13.yml --name nccl_wheel`.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from imagebuild import REPOSITORY, build_and_report, ensure_base, in_image

BASE = "efa-image/base:debian13-cuda13"
PROFILE = "portable-cuda13"


@pytest.fixture(scope="module")
def cuda13_base() -> str:
    """Not one of make test's base-images: this module makes it (about 2 minutes, from the
    mirror's cuda13_toolkit wheels)."""
    return ensure_base(BASE)


@pytest.fixture(scope="module")
def built(cuda13_base, tmp_path_factory) -> dict:
    report = tmp_path_factory.mktemp("cuda13") / "report.json"
    return build_and_report(report, flavor="efa-reduced", profile=PROFILE, base=cuda13_base)


def test_the_base_has_nvcc_13_in_nvidias_layout(cuda13_base):
    proc = in_image(
        cuda13_base,
        "nvcc --version; echo CUDA_HOME=$CUDA_HOME; readlink /usr/local/cuda/lib64;"
        " readlink /usr/local/cuda/lib/libcudart.so; ldconfig -p | grep -c 'libcudart.so.13 '",
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Cuda compilation tools, release 13." in out
    assert "CUDA_HOME=/usr/local/cuda\nlib\nlibcudart.so.13\n1\n" in out
    labels = json.loads(
        subprocess.run(
            ["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", cuda13_base],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert labels["org.efa-image.base.cuda.version"].startswith("13.")


def test_it_was_judged_and_verified_for_cuda_13(built):
    output = built["output"]
    assert "CUDA in the base image: 13." in output
    assert "ok   nccl-cuda-major-matches-base" in output
    assert "ok   image ENV: matches env.d" in output
    assert f"{REPOSITORY}:efa-reduced-{PROFILE}" in built["tags"]


def test_libfabric_was_built_with_cuda(built):
    proc = in_image(
        built["image"],
        "fi_info --version; fi_info -l | grep -x efa:;"
        " grep -a -c -F libcudart.so /opt/amazon/efa/lib/libfabric.so.1",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "libfabric: 2.1.0" in proc.stdout and "efa:" in proc.stdout
    assert int(proc.stdout.split()[-1]) >= 1  # hmem_cuda.c's dlopen("libcudart.so")
    manifest = json.loads(in_image(built["image"], "cat /opt/efa-image/manifest.json").stdout)
    components = {c["name"]: c for c in manifest["components"]}
    assert components["efa"]["method"] == "source" and components["efa"]["hmem_cuda"] is True
    assert manifest["profile"] == PROFILE


def test_nccl_is_the_cu13_wheels(built):
    proc = in_image(
        built["image"],
        "python3 -c 'import ctypes; v = ctypes.c_int();"
        ' ctypes.CDLL("libnccl.so.2").ncclGetVersion(ctypes.byref(v)); print(v.value)\';'
        " ldconfig -p | grep -m1 'libnccl.so.2 '",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    version, library = proc.stdout.splitlines()[:2]
    assert version == "23007"
    assert library.endswith("=> /opt/nccl/lib/libnccl.so.2")
    manifest = json.loads(in_image(built["image"], "cat /opt/efa-image/manifest.json").stdout)
    nccl = {c["name"]: c for c in manifest["components"]}["nccl"]
    assert nccl["method"] == "wheel" and "nvidia_nccl_cu13-2.30.7" in nccl["source"]
