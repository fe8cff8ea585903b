"""GDRCopy's userspace library from the lock's tag archive, on Debian 12.

The checks here repeat AWS's sanity script (deep-learning-containers
check_nccl_efa_gdrcopy.sh) at the role's prefix, written independently of the
role's own verifier (files/gdrcopy_check.py), which they also run against a
wrong version to show that it fails.
"""

import json
import re
from pathlib import Path

from efa_image.artifacts import context

GDRCOPY = context.role_lock("portable").get("gdrcopy")
API = ".".join(GDRCOPY.version.split(".")[:2])
MAJOR = API.split(".")[0]
PREFIX = "/opt/gdrcopy"
LIBDIR = f"{PREFIX}/lib"
CHECK = (Path(__file__).parents[3] / "files" / "gdrcopy_check.py").read_text()
# The script runs as the role runs it: through common's library_check, both as text.
LIBRARY_CHECK = (Path(__file__).parents[4] / "common" / "files" / "library_check.py").read_text()
# AWS's check: load it and resolve the two functions, without calling gdr_open
# (it opens /dev/gdrdrv, which only a GPU host's kernel module provides).
RESOLVE = (
    "import ctypes; lib = ctypes.CDLL('libgdrapi.so');"
    " print(bool(lib.gdr_open), bool(lib.gdr_pin_buffer))"
)
RUNTIME_VERSION = (
    "import ctypes; lib = ctypes.CDLL('libgdrapi.so.{major}');"
    " a, b = ctypes.c_int(), ctypes.c_int();"
    " lib.gdr_runtime_get_version(ctypes.byref(a), ctypes.byref(b)); print(a.value, b.value)"
)


def test_libgdrapi_is_in_the_linker_cache(host):
    cache = host.check_output("ldconfig -p")
    listed = dict(re.findall(r"(?m)^\s*(libgdrapi\.so(?:\.\d+)?) \(.*=> (\S+)$", cache))
    assert listed == {
        f"libgdrapi.so.{MAJOR}": f"{LIBDIR}/libgdrapi.so.{MAJOR}",
        "libgdrapi.so": f"{LIBDIR}/libgdrapi.so",
    }
    assert host.file(f"{LIBDIR}/libgdrapi.so").linked_to == f"{LIBDIR}/libgdrapi.so.{API}"
    assert host.file("/etc/ld.so.conf.d/efa-image-gdrcopy.conf").content_string == f"{LIBDIR}\n"


def test_ldd_resolves_everything(host):
    ldd = host.check_output(f"ldd {LIBDIR}/libgdrapi.so.{MAJOR}")
    assert "not found" not in ldd and "libc.so.6" in ldd


def test_soname_is_the_major_version(host):
    # The dynamic section's string, read without binutils (not in every base).
    data = host.file(f"{LIBDIR}/libgdrapi.so.{API}").content
    assert f"libgdrapi.so.{MAJOR}\0".encode() in data


def test_ctypes_loads_it_and_resolves_gdr_open_and_gdr_pin_buffer(host):
    assert host.check_output("python3 -c %s", RESOLVE) == "True True"


def test_library_reports_the_lock_version(host):
    output = host.check_output("python3 -c %s", RUNTIME_VERSION.format(major=MAJOR))
    assert output.replace(" ", ".") == API


def test_headers_present_with_the_lock_version(host):
    header = host.file(f"{PREFIX}/include/gdrapi.h").content_string
    major = re.search(r"(?m)^#define GDR_API_MAJOR_VERSION\s+(\d+)", header).group(1)
    minor = re.search(r"(?m)^#define GDR_API_MINOR_VERSION\s+(\d+)", header).group(1)
    assert f"{major}.{minor}" == API
    assert host.file(f"{PREFIX}/include/gdrconfig.h").is_file


def test_only_the_library_and_headers_are_installed(host):
    installed = host.check_output(f"ls -A {PREFIX}").split()
    assert installed == [".efa-image-installed", "include", "lib"]
    assert sorted(host.check_output(f"ls -A {PREFIX}/include").split()) == [
        "gdrapi.h",
        "gdrconfig.h",
    ]
    assert not host.file("/var/tmp/efa-image-build/gdrcopy").exists


def run_role_check(host, version):
    result = host.run(
        "python3 -c %s %s --library libgdrapi.so --include %s --version %s",
        LIBRARY_CHECK,
        CHECK,
        f"{PREFIX}/include",
        version,
    )
    return result.rc, json.loads(result.stdout)


def test_the_role_verifier_passes_here(host):
    rc, result = run_role_check(host, GDRCOPY.version)
    assert (rc, result["problems"]) == (0, [])
    assert result["loaded"] == f"{LIBDIR}/libgdrapi.so.{API}"
    assert result["runtime_version"] == API


def test_the_role_verifier_fails_on_another_version(host):
    rc, result = run_role_check(host, "2.4.4")
    assert rc == 1
    assert f"declares GDR_API version {API}, not 2.4" in result["problems"][0]
    assert f"gdr_runtime_get_version() reports {API}, not 2.4" in result["problems"][1]


def test_component_record(host):
    record = json.loads(host.file("/opt/efa-image/components/gdrcopy.json").content_string)
    assert (record["name"], record["method"], record["version"]) == (
        "gdrcopy",
        "source",
        GDRCOPY.version,
    )
    assert (record["sha256"], record["source"]) == (GDRCOPY.sha256, GDRCOPY.urls[0])
    assert record["prefix"] == PREFIX and record["api_version"] == API
    assert record["library"] == f"{LIBDIR}/libgdrapi.so.{MAJOR}"
    # HARDWARE: the scenario turns the gdrdrv check on; a container has no module
    # of its own, so this is what the machine's kernel has loaded, never faked.
    gdrdrv = record["gdrdrv"]
    if host.file("/sys/module/gdrdrv/version").exists:
        assert gdrdrv["loaded"] is True and gdrdrv["version"]
    else:
        assert gdrdrv == {
            "loaded": False,
            "version": None,
            "note": "gdrdrv not loaded (HARDWARE: GPU hosts only;"
            " the host NVIDIA driver stack provides it)",
        }


def test_install_record(host):
    record = json.loads(host.file(f"{PREFIX}/.efa-image-installed").content_string)
    assert record["component"] == "gdrcopy"
    assert record["inputs"]["artifact"] == {
        "name": "gdrcopy",
        "version": GDRCOPY.version,
        "sha256": GDRCOPY.sha256,
    }
    assert record["inputs"]["steps"] == [
        ["make", "lib"],
        ["make", f"prefix={PREFIX}", "lib_install"],
    ]
