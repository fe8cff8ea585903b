"""PyTorch from the lock's wheel set on Debian 12, on the image's one NCCL."""

import json
import re
import shlex

import pytest
from packaging.utils import canonicalize_name

from efa_image.artifacts import context

LOCK = context.role_lock()
WHEELS = LOCK.select(["pytorch"])
TORCH = LOCK.get("pytorch/torch")
NCCL = LOCK.get("nccl_wheel")
VENV = "/opt/efa-image/venv"
PYTHON = f"{VENV}/bin/python"
IMAGE_NCCL = "/opt/nccl/lib/libnccl.so.2"
# One import of torch (seconds each) for every test that asks it something: its
# version and CUDA, its directory, and every libnccl file the process maps once
# torch is imported, with its ncclGetVersion.
TORCH_FACTS = (
    "import ctypes, json, os, torch\n"
    "paths = sorted({os.path.realpath(l.split()[-1]) for l in open('/proc/self/maps')"
    " if l.split()[-1].startswith('/') and '/libnccl' in l.split()[-1]})\n"
    "def code(p):\n"
    "    v = ctypes.c_int(); ctypes.CDLL(p).ncclGetVersion(ctypes.byref(v)); return v.value\n"
    "print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda,\n"
    "    'dir': os.path.dirname(torch.__file__), 'mapped': {p: code(p) for p in paths}}))\n"
)


@pytest.fixture(scope="module")
def torch_facts(host):
    return json.loads(host.check_output(f"{PYTHON} -c {shlex.quote(TORCH_FACTS)}"))


def test_torch_is_the_pinned_release_for_cuda_12_4(torch_facts):
    assert torch_facts["version"].split("+")[0] == TORCH.version
    assert torch_facts["cuda"] == "12.4"


def test_torch_maps_exactly_the_images_nccl(torch_facts):
    """No second libnccl: PyTorch, the plugin and nccl-tests share the nccl role's."""
    mapped = torch_facts["mapped"]
    code = mapped.get(IMAGE_NCCL)
    assert list(mapped) == [IMAGE_NCCL]
    assert f"{code // 10000}.{code % 10000 // 100}.{code % 100}" == NCCL.version


def test_no_nccl_of_its_own_in_the_environment(host):
    assert host.run(f"{PYTHON} -m pip show nvidia-nccl-cu12").rc != 0
    assert host.check_output(f"find {VENV} -name 'libnccl*'") == ""


def test_the_environment_holds_every_locked_wheel(host):
    installed = json.loads(host.check_output(f"{PYTHON} -m pip list --format json"))
    versions = {canonicalize_name(p["name"]): p["version"] for p in installed}
    for wheel in WHEELS:
        assert versions.get(wheel.name.split("/", 1)[1]) == wheel.version, wheel.filename
    # pip check: nothing unmet but the NCCL left out on purpose.
    check = host.run(f"{PYTHON} -m pip check")
    unmet = [line for line in check.stdout.splitlines() if line.strip()]
    assert unmet == [f"torch {TORCH.version} requires nvidia-nccl-cu12, which is not installed."]


@pytest.mark.parametrize("library", ["libtorch_cuda.so", "libtorch_python.so", "libc10_cuda.so"])
def test_torch_libraries_resolve(host, torch_facts, library):
    lib = torch_facts["dir"] + "/lib"
    ldd = host.check_output(f"ldd {lib}/{library}")
    assert "not found" not in ldd
    if library == "libtorch_cuda.so":
        assert re.search(rf"libnccl\.so\.2 => {re.escape(IMAGE_NCCL)} ", ldd)


def test_environment_is_first_on_path_and_isolated(host):
    record = json.loads(host.file("/opt/efa-image/env.d/50-pytorch.json").content_string)
    assert record == {"path": [f"{VENV}/bin"], "env": {}}
    assert host.check_output("bash -lc 'command -v python3'") == f"{VENV}/bin/python3"
    assert "include-system-site-packages = false" in host.file(f"{VENV}/pyvenv.cfg").content_string


def test_install_record_names_every_wheel(host):
    record = json.loads(host.file(f"{VENV}/.efa-image-installed-pytorch").content_string)
    assert record["component"] == "pytorch"
    assert record["inputs"]["wheels"] == {w.filename: w.sha256 for w in WHEELS}
    assert record["inputs"]["version"] == TORCH.version
    # The 2.7 GB of wheels do not stay in the image.
    assert not host.file("/var/tmp/efa-image-build/pytorch-wheels").exists


def test_manifest_records_torch_and_both_nccl_versions(host):
    manifest = json.loads(host.file("/opt/efa-image/manifest.json").content_string)
    component = {c["name"]: c for c in manifest["components"]}["pytorch"]
    assert component["method"] == "wheel" and component["version"].startswith(TORCH.version)
    assert component["cuda"] == "12.4"
    assert component["sha256"] == TORCH.sha256 and component["source"] == TORCH.urls[0]
    # What torch was built with (torch.cuda.nccl.version()) and what it loads.
    assert component["nccl"] == {
        "built": "2.21.5",
        "loaded": IMAGE_NCCL,
        "loaded_version": NCCL.version,
    }
    assert "torch-nccl-matches-image-nccl" in component["compatibility"]
    assert "image-nccl-not-older-than-torch-build" in component["compatibility"]
