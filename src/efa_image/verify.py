"""Hardware-aware verification of the EFA userspace, shared by the CLI and molecule.

Checks run through a `run(command) -> Result` callable, so the same code serves
`docker exec` (efa-image verify) and testinfra (`host.run`). With EFA devices
(/dev/infiniband/uverbs*) present, the EFA provider must offer RDM endpoints
with protocol FI_PROTO_EFA. Without them, that check is impossible, and the
report says so and checks instead that the EFA provider is built in, that
libfabric links libefa, that asking for efa fails with -61 (no device) and that
the tcp provider works.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Protocol

from efa_image import fi_info


class Output(Protocol):
    rc: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Outcome:
    rc: int
    stdout: str
    stderr: str


Run = Callable[[str], Output]


@dataclass(frozen=True)
class Finding:
    check: str
    ok: bool
    detail: str


@dataclass
class Report:
    mode: str
    reason: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.findings) and all(f.ok for f in self.findings)

    def add(self, check: str, ok: bool, detail: str) -> None:
        self.findings.append(Finding(check, ok, detail))

    def render(self) -> str:
        lines = [f"EFA verification, mode {self.mode}: {self.reason}"]
        for finding in self.findings:
            lines.append(f"  {'ok  ' if finding.ok else 'FAIL'} {finding.check}: {finding.detail}")
        lines.append("result: " + ("passed" if self.ok else "FAILED"))
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "ok": self.ok}, indent=2)


def efa_devices(run: Run) -> list[str]:
    found = run("ls -1 /dev/infiniband/ 2>/dev/null")
    return sorted(n for n in found.stdout.split() if n.startswith("uverbs"))


def verify_efa(run: Run, prefix: str = "/opt/amazon/efa", version: str | None = None) -> Report:
    fi = shlex.quote(f"{prefix}/bin/fi_info")
    devices = efa_devices(run)
    if devices:
        report = Report("hardware", f"EFA devices present: {', '.join(devices)}")
    else:
        report = Report(
            "no-device",
            "no /dev/infiniband/uverbs* here (no EFA instance, or devices not passed to the "
            "container): the EFA endpoint check is replaced by build and loader checks",
        )

    versions = fi_info.parse_version(run(f"{fi} --version").stdout)
    libfabric = versions.get("libfabric", "")
    if version:
        report.add("version", libfabric == version, f"libfabric {libfabric or '?'}, want {version}")
    else:
        report.add("version", bool(libfabric), f"libfabric {libfabric or 'not reported'}")

    providers = fi_info.parse_provider_list(run(f"{fi} -l").stdout)
    report.add("efa provider built", "efa" in providers, f"fi_info -l: {' '.join(providers)}")

    ldd = run(f"ldd {shlex.quote(prefix + '/lib/libfabric.so.1')}").stdout
    missing = [line.split()[0] for line in ldd.splitlines() if "not found" in line]
    report.add(
        "shared libraries",
        bool(ldd) and not missing,
        f"not found: {', '.join(missing)}" if missing else "all resolved",
    )

    efa = run(f"{fi} -p efa -t FI_EP_RDM")
    endpoints = fi_info.parse_endpoints(efa.stdout)
    if devices:
        good = [e for e in endpoints if e.provider == "efa" and e.protocol == "FI_PROTO_EFA"]
        report.add(
            "efa RDM endpoints",
            efa.rc == 0 and bool(good),
            f"{len(good)} with FI_PROTO_EFA ({', '.join(e.domain for e in good) or 'none'})",
        )
    else:
        report.add(
            "libfabric links libefa",
            "libefa.so.1" in ldd,
            "libefa.so.1 linked" if "libefa.so.1" in ldd else "libefa.so.1 missing from ldd",
        )
        error = fi_info.getinfo_error(efa.stdout + efa.stderr)
        report.add(
            "efa without a device",
            efa.rc != 0 and error is not None and error[0] == -61,
            f"fi_getinfo {error[0]} ({error[1]})"
            if error
            else f"exit {efa.rc}, no fi_getinfo error",
        )
    tcp = run(f"{fi} -p tcp")
    tcp_endpoints = [e for e in fi_info.parse_endpoints(tcp.stdout) if "tcp" in e.providers]
    report.add(
        "tcp provider", tcp.rc == 0 and bool(tcp_endpoints), f"{len(tcp_endpoints)} endpoints"
    )
    return report
