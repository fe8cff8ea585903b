"""NCCL_DEBUG=INFO lines of a host with EFA, which no captured fixture holds.

Derived, not captured: each comes from a format string of the versions the lock
pins (NCCL v2.30.4-1, aws-ofi-nccl v1.19.0), cited by file and line, filled in
with what a p5.48xlarge reports (provider efa with 32 NICs, the RDMA protocol,
GPUDirect RDMA enabled, the AWS platform).
"""

EFA_LINES = "\n".join(
    f"p5-a:101:101 [0] NCCL INFO {message}"
    for message in (
        # NCCL v2.30.4-1 src/init.cc:671 VERSION_STRING "NCCL version %d.%d.%d%s+cuda%d.%d"
        "NCCL version 2.30.4+cuda12.9",
        # NCCL v2.30.4-1 src/plugin/net/net_v11.cc:85 "NET/Plugin: Loaded net plugin %s (v11)"
        "NET/Plugin: Loaded net plugin Libfabric (v11)",
        # aws-ofi-nccl v1.19.0 src/nccl_ofi_net.cpp:148 "Initializing " PACKAGE_STRING
        "NET/OFI Initializing aws-ofi-nccl 1.19.0",
        # aws-ofi-nccl v1.19.0 src/nccl_ofi_net.cpp:193 "Plugin selected platform: %s"
        "NET/OFI Plugin selected platform: AWS",
        # aws-ofi-nccl v1.19.0 src/nccl_ofi_net.cpp:594
        # "Selected provider is %s, fabric is %s (found %d nics)"
        "NET/OFI Selected provider is efa, fabric is efa (found 32 nics)",
        # aws-ofi-nccl v1.19.0 src/nccl_ofi_net.cpp:299 "Using transport protocol %s"
        "NET/OFI Using transport protocol RDMA",
        # NCCL v2.30.4-1 src/init.cc:481 "Using network %s"
        "Using network Libfabric",
        # NCCL v2.30.4-1 src/graph/topo.cc:1457 "NET/%s : GPU Direct RDMA %s for HCA %d '%s'"
        "NET/Libfabric : GPU Direct RDMA Enabled for HCA 0 'rdmap79s0'",
        # NCCL v2.30.4-1 src/transport/net.cc:321
        # "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s"
        "Channel 00/0 : 0[0] -> 8[0] [send] via NET/Libfabric/0/GDRDMA",
        # NCCL v2.30.4-1 src/plugin/tuner/tuner_v3.cc:40 "TUNER/Plugin: Using %s (v3)"
        "TUNER/Plugin: Using nccl_ofi_tuner (v3)",
    )
)
