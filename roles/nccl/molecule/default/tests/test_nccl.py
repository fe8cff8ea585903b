"""NCCL from the wheel (CI mirror) and from Debian's packages: linker cache, versions, record."""

import json
import re

import pytest

from efa_image.artifacts import context

WHEEL = context.role_lock().get("nccl_wheel")
PACKAGE_VERSION = "2.22.3"
VERSION_CODE = (
    "import ctypes,sys; v=ctypes.c_int();"
    " ctypes.CDLL(sys.argv[1]).ncclGetVersion(ctypes.byref(v)); print(v.value)"
)


@pytest.fixture
def method(host):
    """The platform's name ends in its method (see converge.yml)."""
    return host.backend.get_hostname().removeprefix("efa-image-nccl-")


@pytest.fixture
def layout(host, method):
    if method == "wheel":
        return "/opt/nccl/lib", "/opt/nccl/include", WHEEL.version
    return "/usr/lib/x86_64-linux-gnu", "/usr/include", PACKAGE_VERSION


def test_library_is_in_the_linker_cache(host, layout):
    libdir, _, _ = layout
    # With merged /usr, ld.so lists /usr/lib/<triplet> as /lib/<triplet>.
    listed = re.findall(r"libnccl\.so\.2 \(.*=> (\S+)", host.check_output("ldconfig -p"))
    assert f"{libdir}/libnccl.so.2".removeprefix("/usr") in [p.removeprefix("/usr") for p in listed]


def test_header_library_and_method_agree(host, layout):
    _, includedir, version = layout
    header = host.file(f"{includedir}/nccl.h").content_string
    fields = ("MAJOR", "MINOR", "PATCH")
    parts = [re.search(rf"#define NCCL_{p} (\d+)", header).group(1) for p in fields]
    assert ".".join(parts) == version
    code = int(host.check_output(f"python3 -c '{VERSION_CODE}' libnccl.so.2"))
    assert f"{code // 10000}.{code % 10000 // 100}.{code % 100}" == version


def test_nothing_unresolved(host, layout):
    libdir, _, _ = layout
    assert "not found" not in host.check_output(f"ldd {libdir}/libnccl.so.2")


def test_component_record(host, method, layout):
    _, _, version = layout
    record = json.loads(host.file("/opt/efa-image/components/nccl.json").content_string)
    assert record["method"] == method and record["version"] == version
    if method == "wheel":
        assert record["sha256"] == WHEEL.sha256 and record["source"] == WHEEL.urls[0]
        installed = json.loads(host.file("/opt/nccl/.efa-image-installed").content_string)
        assert installed["component"] == "nccl"
        assert installed["inputs"]["artifact"] == {
            "name": "nccl_wheel",
            "version": WHEEL.version,
            "sha256": WHEEL.sha256,
        }
        assert host.file("/opt/nccl/lib/libnccl.so").linked_to == "/opt/nccl/lib/libnccl.so.2"
        # The 400 MB wheel does not stay behind in the build tree.
        assert not host.file("/var/tmp/efa-image-build/nccl").exists
    else:
        assert record["source"] == "apt: libnccl2 libnccl-dev"
        assert host.package("libnccl-dev").version.startswith(PACKAGE_VERSION)


def test_nccl_conf_excludes_docker0_and_loopback_as_aws_images_do(host):
    """AWS's own image check asserts /etc/nccl.conf; NCCL's socket transport must skip
    docker0 and lo, and only the configured lines are there."""
    conf = host.file("/etc/nccl.conf")
    assert conf.exists and conf.mode == 0o644
    lines = [line for line in conf.content_string.splitlines() if not line.startswith("#")]
    assert lines == ["NCCL_SOCKET_IFNAME=^docker0,lo"]
