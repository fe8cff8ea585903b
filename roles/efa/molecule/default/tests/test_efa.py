"""The efa role (source method): libfabric with the EFA provider, verified."""

import json

from efa_image.artifacts import context
from efa_image.verification import verify

LIBFABRIC = context.role_lock("portable").get("libfabric")
PREFIX = "/opt/amazon/efa"


def test_hardware_aware_verification_passes(host):
    report = verify.verify_efa(host.run, PREFIX, LIBFABRIC.version)
    print(report.render())
    assert report.ok, report.render()
    # No EFA device in CI: the report must say which mode ran.
    assert report.mode == ("hardware" if host.file("/dev/infiniband").exists else "no-device")


def test_only_the_requested_providers_are_built(host):
    listing = host.check_output(f"{PREFIX}/bin/fi_info -l")
    providers = {line[:-1] for line in listing.splitlines() if line and not line[0].isspace()}
    assert providers - {"ofi_hook_noop", "off_coll"} == {"efa", "shm", "sm2", "tcp", "ofi_rxm"}


def test_record_is_written_only_for_a_verified_build(host):
    record = json.loads(host.file(f"{PREFIX}/.efa-image-installed").content_string)
    assert record["component"] == "libfabric"
    inputs = record["inputs"]
    assert inputs["artifact"] == {
        "name": "libfabric",
        "version": LIBFABRIC.version,
        "sha256": LIBFABRIC.sha256,
    }
    assert inputs["prefix"] == PREFIX
    assert inputs["steps"] == [
        ["./configure", "--disable-dependency-tracking", f"--prefix={PREFIX}", "--disable-static"]
        + ["--enable-only"]
        + [f"--enable-{name}" for name in ("efa", "shm", "sm2", "tcp", "rxm")],
        ["make"],
        ["make", "install"],
    ]


def test_linker_and_environment(host):
    assert host.file("/etc/ld.so.conf.d/efa-image-efa.conf").content_string == f"{PREFIX}/lib\n"
    assert f"{PREFIX}/lib/libfabric.so.1" in host.check_output("ldconfig -p | grep libfabric.so.1")
    env = json.loads(host.file("/opt/efa-image/env.d/10-efa.json").content_string)
    assert env == {
        "path": [f"{PREFIX}/bin"],
        "env": {"RDMAV_FORK_SAFE": "1", "FI_EFA_FORK_SAFE": "1"},
    }
    login = host.run(
        "bash -lc 'command -v fi_info; echo $RDMAV_FORK_SAFE $FI_EFA_FORK_SAFE"
        "; echo ${FI_PROVIDER-unset}'"
    )
    assert login.stdout.split() == [f"{PREFIX}/bin/fi_info", "1", "1", "unset"]


def test_no_build_tree_is_left(host):
    assert not host.file("/var/tmp/efa-image-build/libfabric").exists
    assert host.package("ibverbs-providers").is_installed
    assert host.file("/usr/bin/ibv_devinfo").exists


def test_rdma_core_provides_libefa(host):
    assert host.file("/usr/lib/x86_64-linux-gnu/libefa.so.1").exists
