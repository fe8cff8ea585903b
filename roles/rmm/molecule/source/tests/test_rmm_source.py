"""rmm built from its release archive with Debian's CUDA, and compiled against."""

import json

from efa_image.artifacts import context

LOCK = context.role_lock()
SOURCE = LOCK.get("rmm")
VERSION = ".".join(str(int(part)) for part in SOURCE.version.split("."))
LIBDIR = "/opt/rmm/lib64"


def test_library_resolves_and_is_cached(host):
    ldd = host.check_output(f"ldd {LIBDIR}/librmm.so")
    assert "not found" not in ldd
    assert f"librapids_logger.so => {LIBDIR}/librapids_logger.so" in ldd
    assert f"=> {LIBDIR}/librmm.so" in host.check_output("ldconfig -p")


def test_cmake_package_has_the_lock_version(host):
    text = host.file(f"{LIBDIR}/cmake/rmm/rmm-config-version.cmake").content_string
    assert f'set(PACKAGE_VERSION "{VERSION}")' in text or f'"{SOURCE.version}"' in text


def test_compile_check_ran_with_nvcc(host):
    record = json.loads(host.file("/opt/efa-image/components/rmm.json").content_string)
    assert record["method"] == "source" and record["sha256"] == SOURCE.sha256
    assert record["compile_check"].startswith(
        "passed: compiled with /usr/lib/nvidia-cuda-toolkit/bin/nvcc"
    )
    installed = json.loads(host.file("/opt/rmm/.efa-image-installed").content_string)
    assert installed["inputs"]["compile_check"]["compiled_with"].endswith("/bin/nvcc")
    assert installed["inputs"]["archs"]
