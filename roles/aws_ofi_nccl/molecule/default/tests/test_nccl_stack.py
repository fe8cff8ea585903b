"""aws-ofi-nccl and nccl-tests built from their archives against libfabric, NCCL and CUDA."""

import json

import pytest

from efa_image.artifacts import context

LOCK = context.role_lock()
PLUGIN = "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"
SYMBOLS = (
    "import ctypes,sys; l=ctypes.CDLL(sys.argv[1]);"
    " print(' '.join(n for n in sys.argv[2:] if hasattr(l, n)))"
)
BINARIES = ["all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "sendrecv_perf"]


def test_plugin_resolves_against_the_roles_libfabric(host):
    ldd = host.check_output(f"ldd {PLUGIN}")
    assert "not found" not in ldd
    assert "/opt/amazon/efa/lib/libfabric.so.1" in ldd


def test_plugin_exports_nccl_net_interfaces(host):
    found = host.check_output(
        f'python3 -c "{SYMBOLS}" {PLUGIN} ncclNetPlugin_v8 ncclNetPlugin_v9 ncclNetPlugin_v10'
    ).split()
    assert "ncclNetPlugin_v8" in found


def test_nccl_finds_the_plugin_through_ldso(host):
    cache = host.check_output("ldconfig -p")
    assert "libnccl-net.so (" in cache or "libnccl-net-ofi.so (" in cache
    assert "/opt/amazon/ofi-nccl/lib/libnccl-net" in cache
    # What the plugin dlopens where built with dynamic cudart (aws/aws-ofi-nccl#244).
    assert "libcudart.so (" in cache


@pytest.mark.parametrize("name", ["aws_ofi_nccl", "nccl_tests"])
def test_records_name_the_archive(host, name):
    artifact = LOCK.get(name)
    record = json.loads(host.file(f"/opt/efa-image/components/{name}.json").content_string)
    assert record["version"] == artifact.version and record["sha256"] == artifact.sha256


def test_plugin_configured_for_aws_without_tests(host):
    record = json.loads(host.file("/opt/amazon/ofi-nccl/.efa-image-installed").content_string)
    configure = record["inputs"]["steps"][0]
    assert configure[0] == "./configure"
    assert "--enable-platform-aws" in configure and "--disable-tests" in configure
    assert not host.file("/opt/amazon/ofi-nccl/bin/nccl_message_transfer").exists


@pytest.mark.parametrize("binary", BINARIES)
def test_nccl_tests_binaries_on_path_and_linked(host, binary):
    path = f"/opt/nccl-tests/bin/{binary}"
    assert host.file(path).mode & 0o111
    ldd = host.check_output(f"ldd {path}")
    assert "not found" not in ldd
    assert "/opt/nccl/lib/libnccl.so.2" in ldd and "libmpi.so" in ldd
    assert host.run(f"bash -lc 'command -v {binary}'").stdout.strip() == path


def test_build_trees_are_gone(host):
    for tree in ("aws_ofi_nccl", "nccl_tests"):
        assert not host.file(f"/var/tmp/efa-image-build/{tree}").exists
