"""What NCCL and aws-ofi-nccl say about their network, read from real logs and format strings.

The logs in tests/data/gpu are the real H200 captures of ../shared/fixtures/gpu
(copied unchanged; test_fixtures_are_the_shared_ones checks that): aws-ofi-nccl
1.19.0, libfabric 2.1.0, NCCL 2.28.9, one GPU, no EFA device.

No fixture holds what a host with EFA prints: tests/nccl_lines.py derives those
lines from the pinned versions' format strings, citing each.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from efa_image.verification import nccl_log
from nccl_lines import EFA_LINES

DATA = Path(__file__).parent / "data" / "gpu"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "gpu"


def fixture(name: str) -> nccl_log.NetworkFacts:
    return nccl_log.parse((DATA / name).read_text())


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} is not beside this checkout")
def test_fixtures_are_the_shared_ones():
    def digests(directory: Path) -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}

    assert digests(DATA) == digests(SHARED)


def test_plugin_over_tcp_on_a_host_without_efa():
    facts = fixture("h200-all_reduce_perf-plugin-tcp.log")
    assert (facts.nccl_version, facts.nccl_cuda, facts.cuda_driver) == ("2.28.9", "13.0", 13000)
    assert (facts.net_plugin, facts.net_plugin_api) == ("Libfabric", "v11")
    assert facts.plugin_path == "/opt/amazon/ofi-nccl/lib/libnccl-net.so"
    assert (facts.plugin, facts.plugin_version, facts.libfabric) == (
        "aws-ofi-nccl",
        "1.19.0",
        "2.1",
    )
    assert facts.cuda_runtime == 12040 and facts.platform == "Default"
    assert facts.no_eligible_providers
    assert (facts.provider, facts.fabric, facts.nics) == ("tcp", "192.0.2.0/24", 1)
    assert facts.protocol == "SENDRECV"
    assert (facts.proto_forced, facts.proto_forced_why) == ("simple", "GDR")
    assert facts.network == "Libfabric" and facts.uses_plugin and not facts.plugin_failed
    assert facts.internal_transport is None
    assert facts.gdr == {"Libfabric": False} and facts.gdr_enabled is False
    assert facts.tuner == "nccl_ofi_tuner (v3)"
    assert any("GIN only supports RDMA" in warning for warning in facts.warnings)
    assert facts.summary() == (
        "aws-ofi-nccl 1.19.0 over tcp provider (1 NICs), protocol SENDRECV, GDR disabled,"
        " NCCL_PROTO=simple"
    )


def test_plugin_failing_under_fi_provider_efa_falls_back_to_socket():
    """FI_PROVIDER=efa without EFA: the plugin's initialisation fails, NCCL carries on over its
    own Socket transport (and all_reduce_perf still reports 0 wrong values)."""
    facts = fixture("h200-plugin-fi-provider-efa-no-device.log")
    assert facts.net_plugin == "Libfabric" and facts.plugin_failed
    assert facts.provider is None and facts.protocol is None
    assert facts.network == "Socket" and facts.internal_transport == "Socket"
    assert not facts.uses_plugin and facts.gdr_enabled is False
    assert any("aws-ofi-nccl initialization failed" in warning for warning in facts.warnings)
    assert facts.summary().startswith("NCCL's Socket transport (plugin failed to initialise")


def test_plugin_loaded_but_nccl_net_socket_chosen():
    facts = fixture("h200-plugin-present-nccl-net-socket.log")
    assert facts.net_plugin == "Libfabric" and not facts.plugin_failed
    assert facts.network == "Socket" and not facts.uses_plugin
    assert facts.tuner == "nccl_ofi_tuner (v3)"


def test_no_plugin_nccl_uses_socket_after_ib_finds_no_device():
    facts = fixture("h200-nccl-no-plugin.log")
    assert facts.net_plugin is None and facts.plugin is None
    assert facts.network == "Socket" and facts.gdr == {"Socket": False}


def test_torch_log_with_the_plugin_named_by_nccl_net_plugin():
    facts = fixture("h200-torch-plugin-tcp.log")
    assert facts.plugin_path == "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so"
    assert facts.provider == "tcp" and facts.uses_plugin and facts.gdr_enabled is False


def test_version_only_log_names_no_network():
    facts = fixture("h200-all_reduce_perf-no-plugin.log")
    assert facts.network is None and not facts.uses_plugin


def test_nothing_at_info_level():
    facts = nccl_log.parse("# nccl-tests version 2.17.6\n# Avg bus bandwidth : 0\n")
    assert not facts.seen
    assert "NCCL_DEBUG=INFO" in facts.summary()


def test_efa_with_gpudirect_rdma_from_format_strings():
    facts = nccl_log.parse(EFA_LINES)
    assert (facts.provider, facts.nics, facts.protocol) == ("efa", 32, "RDMA")
    assert facts.platform == "AWS" and facts.uses_plugin
    assert facts.gdr_enabled is True and facts.channels_via == {"NET/Libfabric/0/GDRDMA"}
    assert facts.proto_forced is None and not facts.no_eligible_providers
    assert facts.summary() == (
        "aws-ofi-nccl 1.19.0 over efa provider (32 NICs), protocol RDMA, GDR enabled"
    )


def test_launcher_prefixes_and_the_first_rank_value_win():
    """mpirun --tag-output prefixes every line; a second rank's lines do not override."""
    tagged = "\n".join(f"[1,0]<stdout>:{line}" for line in EFA_LINES.splitlines())
    other = (
        "[1,1]<stdout>:p5-b:7:7 [0] NCCL INFO"
        " NET/OFI Selected provider is tcp, fabric is x (found 1 nics)"
    )
    facts = nccl_log.parse(tagged + "\n" + other)
    assert facts.provider == "efa" and facts.gdr_enabled is True
