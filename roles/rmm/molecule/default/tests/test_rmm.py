"""rmm from its wheels (CI mirror) on a base without CUDA: libraries, versions, records."""

import json
import re

import pytest

from efa_image.artifacts import context

LOCK = context.role_lock()
WHEEL = LOCK.get("rmm_wheel")
LOGGER = LOCK.get("rapids_logger_wheel")
PREFIX = "/opt/rmm"
LIBDIR = f"{PREFIX}/lib64"
# RMM's ABI namespace carries its release: rmm::_RMM_26_10:: for 26.10.
MAJOR, MINOR = (int(part) for part in WHEEL.version.split(".")[:2])
NAMESPACE = f"_RMM_{MAJOR:02d}_{MINOR:02d}"
LOAD = (
    "import ctypes,sys; lib=ctypes.CDLL(sys.argv[1]); f=getattr(lib, sys.argv[2]);"
    " f.restype=ctypes.c_void_p; print(f() or 0)"
)


def test_librmm_resolves_its_logger_beside_it(host):
    ldd = host.check_output(f"ldd {LIBDIR}/librmm.so")
    assert "not found" not in ldd
    assert re.search(rf"librapids_logger\.so => {LIBDIR}/librapids_logger\.so", ldd)


def test_librmm_is_in_the_linker_cache(host):
    assert f"librmm.so (libc6,x86-64) => {LIBDIR}/librmm.so" in host.check_output("ldconfig -p")
    assert host.file("/etc/ld.so.conf.d/efa-image-rmm.conf").content_string == f"{LIBDIR}\n"


def test_librmm_exports_and_runs_the_locked_release(host):
    symbol = f"_ZN3rmm{len(NAMESPACE)}{NAMESPACE}14default_loggerEv"
    logger = host.check_output(f"python3 -c '{LOAD}' librmm.so {symbol}")
    assert int(logger) != 0
    # Another release's symbol is absent: the check above can fail.
    other = f"_ZN3rmm10_RMM_{MAJOR:02d}_{(MINOR + 2) % 100:02d}14default_loggerEv"
    assert host.run(f"python3 -c '{LOAD}' librmm.so {other}").rc != 0


def test_headers_and_cmake_packages_carry_the_lock_versions(host):
    header = host.file(f"{PREFIX}/include/rmm/version_config.hpp").content_string
    assert f'#define RMM_VERSION "{WHEEL.version}"' in header
    for package, version in (("rmm", WHEEL.version), ("rapids_logger", LOGGER.version)):
        text = host.file(f"{LIBDIR}/cmake/{package}/{package}-config-version.cmake").content_string
        assert f'set(PACKAGE_VERSION "{version}")' in text
    targets = host.file(f"{LIBDIR}/cmake/rmm/rmm-targets-release.cmake").content_string
    assert '"${_IMPORT_PREFIX}/lib64/librmm.so"' in targets
    # find_package(rmm) with CMAKE_PREFIX_PATH=/opt/rmm looks in lib/cmake on Debian.
    assert host.file(f"{PREFIX}/lib").linked_to == LIBDIR
    assert host.file(f"{PREFIX}/lib/cmake/rmm/rmm-config.cmake").is_file


@pytest.mark.parametrize(
    "header",
    [
        "rmm/device_buffer.hpp",
        "rmm/mr/cuda_memory_resource.hpp",
        "rapids_logger/logger.hpp",
        "nvtx3/nvtx3.hpp",
    ],
)
def test_headers_are_installed(host, header):
    assert host.file(f"{PREFIX}/include/{header}").is_file


def test_component_record_says_the_compile_check_did_not_run(host):
    record = json.loads(host.file("/opt/efa-image/components/rmm.json").content_string)
    assert record["method"] == "wheel" and record["version"] == WHEEL.version
    assert record["sha256"] == WHEEL.sha256 and record["source"] == WHEEL.urls[0]
    assert record["cuda_major"] == "12"
    assert record["rapids_logger"] == {"version": LOGGER.version, "sha256": LOGGER.sha256}
    assert record["image_cuda"].startswith("no CUDA")
    assert record["compile_check"].startswith("not run: no CUDA compiler in the image")


def test_install_record_names_both_wheels(host):
    installed = json.loads(host.file(f"{PREFIX}/.efa-image-installed").content_string)
    inputs = installed["inputs"]
    assert installed["component"] == "rmm"
    wheel = {"name": "rmm_wheel", "version": WHEEL.version, "sha256": WHEEL.sha256}
    assert inputs["artifact"] == wheel
    assert inputs["logger"] == {
        "name": "rapids_logger_wheel",
        "version": LOGGER.version,
        "sha256": LOGGER.sha256,
    }
    assert "skipped" in inputs["compile_check"]


def test_nothing_of_the_build_stays_in_its_tree(host):
    assert not host.file("/var/tmp/efa-image-build/rmm").exists
    # Only the headers and libraries of the wheels, not their Python packages.
    assert not host.file(f"{PREFIX}/__init__.py").exists
    assert not host.file(f"{PREFIX}/load.py").exists
