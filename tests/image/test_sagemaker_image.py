"""`efa-image build` of the reduced SageMaker flavour on the CI mirror: real METIS,
RMM and PyTorch over the EFA/MPI/NCCL stack, verified, and an MPI job across two
containers of it.

sagemaker-reduced is what reachable sources build (flavors.yml): no aws-ofi-nccl,
nccl-tests or smdistributed, whose archives no reachable source carries. Its base
is Debian 12, whose Python 3.11 is the one the lock's PyTorch wheels are for.

It is built the way a Deep Learning Container is extended: on an efa-reduced image
of Debian 12 built first (the stand-in for the DLC, with EFA, Open MPI and NCCL),
whose components the build finds, verifies and records (origin base) without
installing them again; only METIS, RMM and PyTorch are added.
"""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from imagebuild import PROFILE, REPOSITORY, build_and_report, docker

from efa_image import multihost

FLAVOR = "sagemaker-reduced"
BASE = "efa-image/base:debian12"
PYTHON = "/opt/efa-image/venv/bin/python"
# The stand-in for a DLC: its own repository, so that it never takes the tags of the
# efa-reduced images other tests build; an identical verified one is reused.
EXTENDED_FLAVOR = "efa-reduced"
EXTENDED_REPOSITORY = "efa-image-test-dlc"
FROM_BASE = {"efa", "openmpi", "nccl"}
ADDED = {"metis", "rmm", "pytorch"}
# The base's component files that must reach the extended image untouched.
KEPT_FILES = (
    "/opt/amazon/efa/lib/libfabric.so.1",
    "/opt/amazon/openmpi/lib/libmpi.so",
    "/opt/nccl/lib/libnccl.so.2",
)


@pytest.fixture(scope="module")
def extended(tmp_path_factory) -> dict:
    """The efa-reduced Debian 12 image the SageMaker build extends."""
    return build_and_report(
        tmp_path_factory.mktemp("dlc") / "report.json",
        flavor=EXTENDED_FLAVOR,
        base=BASE,
        repository=EXTENDED_REPOSITORY,
        rebuild=False,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory, extended) -> dict:
    """sagemaker-reduced on that image, named by its tag (what the manifest records)."""
    report = tmp_path_factory.mktemp("sagemaker") / "report.json"
    return build_and_report(report, flavor=FLAVOR, base=extended["tags"][0])


def run(image: str, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "run", "--rm", image, "sh", "-c", script], capture_output=True, text=True
    )


def test_the_build_verified_the_sagemaker_libraries(built):
    assert f"{REPOSITORY}:{FLAVOR}-{PROFILE}" in built["tags"]
    assert {"efa", "openmpi", "nccl", "metis", "rmm", "pytorch"} <= set(built["roles"])
    assert not {"aws_ofi_nccl", "nccl_tests", "smdistributed"} & set(built["roles"])


def file_facts(image: str) -> list[str]:
    """inode, mtime, size and sha256 of each kept file (its real path) in the image."""
    script = " && ".join(
        f'f=$(readlink -f {path}) && echo "$f $(stat -c "%i %Y %s" "$f") $(sha256sum < "$f")"'
        for path in KEPT_FILES
    )
    return docker("run", "--rm", image, "sh", "-c", script).splitlines()


def test_the_base_images_components_were_kept_and_the_rest_added(built):
    print(built["output"][built["output"].find("base image ") :].split("\n")[:2])
    assert set(built["from_base"]) == FROM_BASE, built["from_base"]
    assert set(built["installed"]) >= ADDED and not FROM_BASE & set(built["installed"])
    manifest = json.loads(
        docker("run", "--rm", built["image"], "cat", "/opt/efa-image/manifest.json")
    )
    origin = {component["name"]: component["origin"] for component in manifest["components"]}
    assert {name for name, where in origin.items() if where == "base"} == FROM_BASE, origin
    assert all(origin[name] == "build" for name in ADDED), origin
    methods = {component["name"]: component["method"] for component in manifest["components"]}
    assert all(methods[name] == "present" for name in FROM_BASE), methods


def test_nothing_the_base_had_was_rebuilt_or_replaced(built, extended):
    assert file_facts(built["image"]) == file_facts(extended["image"])
    # Neither compiled nor taken from the build cache: not built at all.
    assert not {"libfabric", "openmpi", "nccl"} & set(built["build_cache"]), built["build_cache"]
    output = built["output"]
    assert not re.search(r"build cache: (libfabric|openmpi|nccl) ", output)
    assert not re.search(r"roles/(efa|openmpi|nccl)/tasks/install-(?!present)", output)
    assert len(re.findall(r"roles/(efa|openmpi|nccl)/tasks/install-present[.]yml", output)) == 3


def test_manifest_records_torch_and_the_libraries(built):
    manifest = json.loads(
        docker("run", "--rm", built["image"], "cat", "/opt/efa-image/manifest.json")
    )
    names = {component["name"] for component in manifest["components"]}
    assert {"efa", "openmpi", "nccl", "metis", "rmm", "pytorch"} <= names, names
    text = json.dumps(manifest)
    assert "2.5.1" in text, "the lock's torch version is not in the manifest"


def test_pytorch_loads_the_images_one_nccl(built):
    """torch.cuda.nccl.version() needs no GPU; the library it loaded is read from
    the process's maps: exactly one libnccl, the nccl role's."""
    script = (
        f"{PYTHON} -c 'import torch; torch.cuda.nccl.version();"
        ' print("\\n".join(sorted({l.split()[-1] for l in open("/proc/self/maps")'
        ' if "libnccl" in l})))\''
    )
    proc = run(built["image"], script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    loaded = proc.stdout.split()
    assert len(loaded) == 1 and loaded[0].startswith("/opt/nccl/"), loaded


def test_metis_partitions_and_rmm_resolves_in_the_image(built):
    script = (
        "ldconfig -p | grep -q 'libmetis.so ' && ldconfig -p | grep -q 'librmm.so '"
        " && ! ldd $(ldconfig -p | awk '/librmm.so /{print $NF; exit}') | grep 'not found'"
        f" && {PYTHON} -c 'import torch, ctypes; ctypes.CDLL(\"libmetis.so\")'"
    )
    proc = run(built["image"], script)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_image_holds_no_toolchain_or_pip_cache(built):
    script = (
        "! command -v gcc && ! command -v make && test ! -e /var/tmp/efa-image-build"
        " && test ! -e /root/.cache/pip"
    )
    proc = run(built["image"], script)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mpi_allreduce_across_two_containers_over_the_ofi_mtl(built):
    job = multihost.run_job(built["image"], 2, provider="tcp")
    print(job.render())
    assert job.rc == 0, job.output
    assert job.hosts_seen == set(job.hosts) and len(job.hosts) == 2
    assert job.ofi_selected == 2
    assert job.ok
