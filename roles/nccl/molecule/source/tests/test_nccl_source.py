"""NCCL built from its release archive: library, headers, versions, architectures."""

import json
import os
import re

from efa_image.artifacts import context

NCCL = context.role_lock().get("nccl")
VERSION = NCCL.version.split("-")[0]
ARCHS = os.environ.get("NCCL_SOURCE_ARCHS", "90").split()


def test_library_and_header_installed_with_the_release_version(host):
    assert host.file(f"/opt/nccl/lib/libnccl.so.{VERSION}").exists
    assert host.file("/opt/nccl/lib/libnccl.so.2").is_symlink
    header = host.file("/opt/nccl/include/nccl.h").content_string
    fields = [
        re.search(rf"#define NCCL_{f} (\d+)", header).group(1) for f in ("MAJOR", "MINOR", "PATCH")
    ]
    assert ".".join(fields) == VERSION
    assert "=> /opt/nccl/lib/libnccl.so.2" in host.check_output("ldconfig -p")


def test_built_for_the_requested_architectures_only(host):
    # cuobjdump is not in Debian's toolkit; the record names what was compiled.
    inputs = json.loads(host.file("/opt/nccl/.efa-image-installed").content_string)["inputs"]
    gencode = " ".join(f"-gencode=arch=compute_{a},code=sm_{a}" for a in ARCHS)
    assert f"NVCC_GENCODE={gencode}" in inputs["steps"][0]
    assert inputs["artifact"]["version"] == NCCL.version
    assert inputs["artifact"]["sha256"] == NCCL.sha256
    assert not host.file("/var/tmp/efa-image-build/nccl").exists


def test_library_reports_its_version_without_a_gpu(host):
    code = host.check_output(
        "python3 -c 'import ctypes; v=ctypes.c_int();"
        ' ctypes.CDLL("libnccl.so.2").ncclGetVersion(ctypes.byref(v)); print(v.value)\''
    )
    major, minor, patch = (int(x) for x in VERSION.split("."))
    assert int(code) == major * 10000 + minor * 100 + patch
