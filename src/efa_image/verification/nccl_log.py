"""Read what NCCL and the aws-ofi-nccl plugin say about the network they use (NCCL_DEBUG=INFO).

A run of all_reduce_perf or a training job can finish with correct results
whatever carried its traffic: EFA with GPUDirect RDMA, libfabric's tcp provider,
or NCCL's own Socket transport after the plugin failed to initialise. Only the
log says which. This module turns the log into those facts; judging them is
`efa_image.verification.verify`'s job.

Every pattern below matches a format string of the versions the lock pins
(NCCL 2.30.4, aws-ofi-nccl 1.19.0) and of the NCCL 2.28.9 the real H200 logs in
tests/data/gpu come from; tests/test_nccl_log.py cites the source lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# NCCL's own transports, used when no external plugin carries the traffic.
INTERNAL_NETWORKS = ("IB", "Socket")
# What aws-ofi-nccl calls itself to NCCL (net plugin name).
OFI_NETWORKS = ("Libfabric", "AWS Libfabric")

# "host:pid:tid [dev] NCCL INFO ", after whatever a launcher or WARN puts before it (a
# timestamp, mpirun's [1,0]<stdout>:, srun's label) and the function WARN names.
_LINE = re.compile(r"\S+:\d+:\d+ \[\d+\] (?:\S.*? )?NCCL (INFO|WARN) (.*)$")
_PATTERNS: dict[str, re.Pattern[str]] = {
    "nccl_version": re.compile(r"^NCCL version (\d+\.\d+\.\d+)\S*?(?:\+cuda(\d+\.\d+))?$"),
    "cuda_driver": re.compile(r"^cudaDriverVersion (\d+)$"),
    "net_plugin": re.compile(r"^NET/Plugin: Loaded net plugin (.+) \((v\d+)\)$"),
    "plugin_path": re.compile(r"^Successfully loaded external network plugin (\S+)$"),
    "plugin_failed": re.compile(r"^Failed to initialize NET plugin (.+)$"),
    "plugin": re.compile(r"^NET/OFI Initializing (\S+) (\d[\w.]*)$"),
    "libfabric": re.compile(r"^NET/OFI Using Libfabric version (\d+\.\d+)$"),
    "cuda_runtime": re.compile(r"^NET/OFI Using CUDA driver version (\d+) with runtime (\d+)$"),
    "platform": re.compile(r"^NET/OFI Plugin selected platform: (.+)$"),
    "no_providers": re.compile(r"^NET/OFI No eligible providers were found$"),
    "provider": re.compile(
        r"^NET/OFI Selected provider is (\S+), fabric is (\S+) \(found (\d+) nics\)$"
    ),
    "protocol": re.compile(r"^NET/OFI Using transport protocol (\w+)"),
    "proto_forced_why": re.compile(r"^NET/OFI Need to force simple protocol: (.+) not supported$"),
    "proto_added": re.compile(r"^NET/OFI Adding NCCL_PROTO=(\S+) to environment$"),
    "proto_env": re.compile(r"^NCCL_PROTO set by environment to (\S+)$"),
    "network": re.compile(r"^Using network (.+)$"),
    "gdr": re.compile(r"^NET/(.+?) : GPU Direct RDMA (Enabled|Disabled) for HCA (\d+) '([^']*)'$"),
    "tuner": re.compile(r"^TUNER/Plugin: Using (\S+) \((v\d+)\)$"),
    "channel": re.compile(r"^Channel \d+/\d+ : .* via (NET/\S+)$"),
}


@dataclass
class NetworkFacts:
    """What the log says carried NCCL's traffic; None where it says nothing."""

    nccl_version: str | None = None
    nccl_cuda: str | None = None  # the CUDA NCCL was built for ("13.0")
    cuda_driver: int | None = None  # cudaDriverVersion (13000 = 13.0)
    cuda_runtime: int | None = None  # as the plugin reports it (12040 = 12.4)
    net_plugin: str | None = None  # the external net plugin NCCL loaded ("Libfabric")
    net_plugin_api: str | None = None  # its NCCL net API ("v11")
    plugin_path: str | None = None
    plugin_failed: bool = False  # loaded, but its initialisation failed
    plugin: str | None = None  # "aws-ofi-nccl"
    plugin_version: str | None = None
    libfabric: str | None = None  # "2.1"
    platform: str | None = None  # the plugin's platform ("AWS", "Default")
    no_eligible_providers: bool = False  # no provider met the plugin's first choice (efa)
    provider: str | None = None  # the libfabric provider the plugin selected
    fabric: str | None = None
    nics: int | None = None
    protocol: str | None = None  # the plugin's transport protocol (RDMA, SENDRECV)
    proto_forced: str | None = None  # NCCL_PROTO forced (by the plugin or the environment)
    proto_forced_why: str | None = None  # "GDR": what the plugin found unsupported
    network: str | None = None  # the network NCCL used ("Libfabric", "Socket", "IB")
    gdr: dict[str, bool] = field(default_factory=dict)  # per NET/<name>: GPUDirect RDMA on
    tuner: str | None = None  # "nccl_ofi_tuner (v3)"
    channels_via: set[str] = field(default_factory=set)  # "NET/Libfabric/0/GDRDMA"
    warnings: list[str] = field(default_factory=list)

    @property
    def seen(self) -> bool:
        """NCCL said anything at INFO level (NCCL_DEBUG=INFO was set)."""
        return self.nccl_version is not None or self.network is not None

    @property
    def uses_plugin(self) -> bool:
        """NCCL's traffic went through the aws-ofi-nccl plugin."""
        return self.network in OFI_NETWORKS and not self.plugin_failed

    @property
    def internal_transport(self) -> str | None:
        """NCCL's own IB or Socket transport, when it used one (the plugin's fallback)."""
        return self.network if self.network in INTERNAL_NETWORKS else None

    @property
    def gdr_enabled(self) -> bool | None:
        """GPUDirect RDMA on the network NCCL used (per its topology line), or on a channel."""
        if any(via.endswith("/GDRDMA") or "/GDRDMA(" in via for via in self.channels_via):
            return True
        if self.network and self.network in self.gdr:
            return self.gdr[self.network]
        return None

    def describe(self) -> str:
        """Every fact the log gave, for a report."""

        def known(value: object) -> str:
            return "?" if value is None else str(value)

        parts = [
            f"NCCL {known(self.nccl_version)} (CUDA {known(self.nccl_cuda)}), "
            f"CUDA driver {known(self.cuda_driver)}, runtime {known(self.cuda_runtime)}",
            f"net plugin {known(self.net_plugin)} {known(self.net_plugin_api)}"
            + (" (failed to initialise)" if self.plugin_failed else ""),
            f"{known(self.plugin)} {known(self.plugin_version)}, libfabric {known(self.libfabric)},"
            f" platform {known(self.platform)}",
            f"provider {known(self.provider)} ({known(self.nics)} NICs), protocol "
            f"{known(self.protocol)}",
            f"network {known(self.network)}, GDR "
            + {True: "enabled", False: "disabled", None: "unknown"}[self.gdr_enabled],
            f"NCCL_PROTO {self.proto_forced or 'not forced'}"
            + (f" ({self.proto_forced_why} not supported)" if self.proto_forced_why else ""),
            f"tuner {known(self.tuner)}",
        ]
        return "; ".join(parts)

    def summary(self) -> str:
        """One line: the network, provider, protocol and GDR, as a person asks for them."""
        if not self.seen:
            return "NCCL said nothing at INFO level (NCCL_DEBUG=INFO not set?)"
        if self.uses_plugin:
            parts = [f"{self.plugin or 'plugin'} {self.plugin_version or '?'} over "
                     f"{self.provider or '?'} provider ({self.nics or '?'} NICs)",
                     f"protocol {self.protocol or '?'}"]  # fmt: skip
        else:
            why = "plugin failed to initialise, " if self.plugin_failed else ""
            parts = [f"NCCL's {self.network or 'unknown'} transport ({why}no aws-ofi-nccl)"]
        gdr = self.gdr_enabled
        parts.append("GDR " + ("enabled" if gdr else "disabled" if gdr is False else "unknown"))
        if self.proto_forced:
            parts.append(f"NCCL_PROTO={self.proto_forced}")
        return ", ".join(parts)


def parse(text: str) -> NetworkFacts:
    """The facts of one rank's NCCL_DEBUG=INFO output (the first value wins, as NCCL's
    initialisation prints each once per communicator)."""
    facts = NetworkFacts()
    for raw in text.splitlines():
        matched = _LINE.search(raw.strip())
        if not matched:
            continue
        level, message = matched.groups()
        if level == "WARN":
            facts.warnings.append(message)
            continue
        for name, pattern in _PATTERNS.items():
            if found := pattern.match(message):
                _record(facts, name, found)
                break
    return facts


def _record(facts: NetworkFacts, name: str, found: re.Match[str]) -> None:
    group = found.group
    if name == "nccl_version" and facts.nccl_version is None:
        facts.nccl_version, facts.nccl_cuda = group(1), group(2)
    elif name == "cuda_driver" and facts.cuda_driver is None:
        facts.cuda_driver = int(group(1))
    elif name == "net_plugin" and facts.net_plugin is None:
        facts.net_plugin, facts.net_plugin_api = group(1), group(2)
    elif name == "plugin_path":
        facts.plugin_path = facts.plugin_path or group(1)
    elif name == "plugin_failed" and group(1) == facts.net_plugin:
        facts.plugin_failed = True
    elif name == "plugin" and facts.plugin is None:
        facts.plugin, facts.plugin_version = group(1), group(2)
    elif name == "libfabric":
        facts.libfabric = facts.libfabric or group(1)
    elif name == "cuda_runtime" and facts.cuda_runtime is None:
        facts.cuda_runtime = int(group(2))
    elif name == "platform":
        facts.platform = facts.platform or group(1)
    elif name == "no_providers":
        facts.no_eligible_providers = True
    elif name == "provider" and facts.provider is None:
        facts.provider, facts.fabric, facts.nics = group(1), group(2), int(group(3))
    elif name == "protocol":
        facts.protocol = facts.protocol or group(1)
    elif name == "proto_forced_why":
        facts.proto_forced_why = facts.proto_forced_why or group(1)
    elif name in ("proto_added", "proto_env"):
        facts.proto_forced = facts.proto_forced or group(1)
    elif name == "network":
        facts.network = facts.network or group(1)
    elif name == "gdr":
        facts.gdr.setdefault(group(1), group(2) == "Enabled")
    elif name == "tuner":
        facts.tuner = facts.tuner or f"{group(1)} ({group(2)})"
    elif name == "channel":
        facts.channels_via.add(group(1))
