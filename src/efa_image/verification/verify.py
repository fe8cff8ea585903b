"""Hardware-aware verification of the EFA userspace, shared by the CLI and molecule.

Checks run through a `run(command) -> Output` callable, so the same code serves
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

from efa_image.compat import rules
from efa_image.sagemaker import instance_types
from efa_image.types import Finding
from efa_image.verification import fi_info, gdrcopy, nccl_log, nccl_tests


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


@dataclass
class Report:
    mode: str
    reason: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        judged = [f.ok for f in self.findings if f.ok is not None]
        return bool(judged) and all(judged)

    def add(self, check: str, ok: bool | None, detail: str) -> None:
        self.findings.append(Finding(check, ok, detail))

    def render(self) -> str:
        lines = [f"EFA verification, mode {self.mode}: {self.reason}"]
        marks = {True: "ok  ", False: "FAIL", None: "note"}
        for finding in self.findings:
            lines.append(f"  {marks[finding.ok]} {finding.check}: {finding.detail}")
        lines.append("result: " + ("passed" if self.ok else "FAILED"))
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "ok": self.ok}, indent=2)


def efa_devices(run: Run) -> list[str]:
    found = run("ls -1 /dev/infiniband/ 2>/dev/null")
    return sorted(n for n in found.stdout.split() if n.startswith("uverbs"))


DEFAULT_PREFIX = "/opt/amazon/efa"
# The efa role records where libfabric went (/usr with the distribution's packages).
EFA_COMPONENT = "/opt/efa-image/components/efa.json"


def efa_prefix(run: Run) -> str:
    """The efa component's prefix as the image records it, else /opt/amazon/efa."""
    found = run(f"cat {EFA_COMPONENT}")
    try:
        prefix = json.loads(found.stdout).get("prefix") if found.rc == 0 else None
    except (ValueError, AttributeError):
        prefix = None
    return str(prefix) if prefix else DEFAULT_PREFIX


def libfabric_library(run: Run, prefix: str, fi: str) -> str:
    """<prefix>/lib/libfabric.so.1, or (distribution packages: multiarch) the one fi_info loads."""
    library = f"{prefix}/lib/libfabric.so.1"
    if run(f"test -e {shlex.quote(library)}").rc == 0:
        return library
    for line in run(f"ldd {fi}").stdout.splitlines():
        name, _, where = line.strip().partition(" => ")
        if name == "libfabric.so.1" and where.startswith("/"):
            return where.split()[0]
    return library


def verify_efa(run: Run, prefix: str | None = None, version: str | None = None) -> Report:
    """`prefix` defaults to the image's record of it (efa_prefix), else /opt/amazon/efa."""
    prefix = prefix or efa_prefix(run)
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

    ldd = run(f"ldd {shlex.quote(libfabric_library(run, prefix, fi))}").stdout
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


# Asks an installed PyTorch for the NCCL it was compiled with (absent: the rules
# on it are skipped). The NCCL it loads is in the pytorch role's manifest record.
TORCH_NCCL = (
    "python3 -c 'import torch; print(torch.cuda.nccl.version())' 2>/dev/null"
    " || /opt/efa-image/venv/bin/python -c 'import torch; print(torch.cuda.nccl.version())'"
)


# Manifests of images built before the efa role's method was renamed name the old word.
RENAMED_METHODS = {"installer": "efa_installer"}


def manifest_components(run: Run) -> dict[str, dict]:
    """The image manifest's components by name ({} without a manifest)."""
    listing = run("cat /opt/efa-image/manifest.json")
    manifest = json.loads(listing.stdout) if listing.rc == 0 and listing.stdout.strip() else {}
    return {c["name"]: c for c in manifest.get("components", [])}


def image_facts(run: Run) -> dict[str, str]:
    """Versions for the compatibility rules from the image manifest (and PyTorch, if any)."""
    components = manifest_components(run)
    facts: dict[str, str] = {}
    if efa := components.get("efa"):
        method = str(efa.get("method", ""))
        facts["efa_method"] = RENAMED_METHODS.get(method, method)
        key = "efa_installer" if facts["efa_method"] == "efa_installer" else "libfabric"
        facts[key] = str(efa.get("version", ""))
        if efa.get("prefix"):
            facts["libfabric_in_usr"] = "yes" if efa["prefix"].rstrip("/") == "/usr" else "no"
    for name in ("nccl", "aws_ofi_nccl"):
        if name in components:
            facts[name] = str(components[name].get("version", ""))
    loaded = (components.get("pytorch") or {}).get("nccl") or {}
    if loaded.get("loaded_version"):
        facts["torch_nccl"] = str(loaded["loaded_version"])
    torch = run(TORCH_NCCL)
    if torch.rc == 0 and torch.stdout.strip():
        facts["torch_nccl_built"] = rules.torch_nccl_version(torch.stdout.strip())
    return facts


def verify_compat(run: Run, report: Report) -> rules.Check:
    """One finding per violated rule, or one saying which rules held and which did not apply."""
    facts = image_facts(run)
    result = rules.check(facts)
    for violation in result.violations:
        report.add(f"compatibility {violation.rule}", False, violation.message)
    if result.ok:
        skipped = ", ".join(s.rule for s in result.skipped) or "none"
        report.add(
            "compatibility",
            True,
            f"{len(result.passed)} rules hold ({', '.join(result.passed) or 'none'}); "
            f"not applicable here: {skipped}",
        )
    return result


def verify_gdrcopy(run: Run, report: Report) -> None:
    """GDRCopy where the manifest lists it, and the host's gdrdrv against it.

    The image's library is checked as AWS's sanity script does; the kernel
    module is the host's (HARDWARE): older than the library draws a warning,
    absent a note, never a pass (efa_image.verification.gdrcopy).
    """
    component = manifest_components(run).get("gdrcopy")
    if component is None:
        return
    report.findings.extend(gdrcopy.image_findings(run, component))
    report.findings.append(
        gdrcopy.gdrdrv_finding(gdrcopy.read_gdrdrv(run), str(component.get("version", "")))
    )


# INIT and NET name the plugin, provider, protocol and GPUDirect RDMA; ENV what was forced.
NCCL_DEBUG = "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV"


def gdr_over_efa(instance_type: str) -> bool | None:
    """Whether the instance type has GPUDirect RDMA over EFA (None: not in the table)."""
    try:
        return instance_types.instance_type(instance_type).gpudirect_rdma
    except instance_types.InstanceTypeError:
        return None


def network_findings(
    facts: nccl_log.NetworkFacts, devices: list[str], gdr_expected: bool | None
) -> list[Finding]:
    """What carried NCCL's traffic, judged against the hardware.

    With EFA devices, anything but aws-ofi-nccl over the efa provider fails (the tcp
    provider and NCCL's Socket transport run too, at a fraction of the bandwidth), and
    so does GPUDirect RDMA off on a type that has it. Without devices nothing can use
    EFA: the report says what was used, as a note, never as a pass.
    """
    check = "NCCL network"
    if not facts.seen:
        return [
            Finding(
                check,
                False,
                f"NCCL printed nothing at INFO level: run with {NCCL_DEBUG} to see its network",
            )
        ]
    described = Finding("NCCL and plugin", None, facts.describe())
    gdr = {True: "GDR enabled", False: "GDR disabled", None: "GDR unknown"}[facts.gdr_enabled]
    used = (
        f"{facts.provider or 'unknown'} provider"
        if facts.uses_plugin
        else f"NCCL's {facts.network or 'unknown'} transport"
    )
    if not devices:
        note = f"{used}, {gdr}, EFA not used (no EFA devices)"
        return [Finding(check, None, note), described]
    problems = []
    if not facts.uses_plugin:
        why = "the plugin failed to initialise" if facts.plugin_failed else "no aws-ofi-nccl"
        problems.append(f"EFA devices present but NCCL used {used} ({why})")
    elif facts.provider != "efa":
        problems.append(f"EFA devices present but aws-ofi-nccl selected the {used}")
    if gdr_expected and facts.gdr_enabled is not True:
        problems.append(f"{gdr} on an instance type with GPUDirect RDMA over EFA")
    if problems:
        return [Finding(check, False, "; ".join(problems)), described]
    return [Finding(check, True, f"aws-ofi-nccl over efa, {gdr}"), described]


def gpu_count(run: Run) -> int:
    found = run("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null")
    return len([line for line in found.stdout.splitlines() if line.strip()]) if found.rc == 0 else 0


def verify_perf(
    run: Run,
    report: Report,
    instance_type: str,
    threshold: float | None = None,
    max_bytes: str = "8G",
) -> nccl_tests.PerfRun | None:
    """HARDWARE: all_reduce_perf on every GPU of this host, twice.

    First as NCCL chooses (NVLink within the node: the nodes_1 floor), then, with two
    or more GPUs, with P2P, SHM and NVLS off, so that NCCL's traffic goes through the
    net plugin and the NICs even on one node (the network_1 floor). NCCL_DEBUG=INFO
    makes NCCL and the plugin say what carried the traffic; network_findings judges
    the run that used the network. Without a GPU the check fails and says why.
    """
    gpus = gpu_count(run)
    if not gpus:
        report.add("nccl-tests", False, "no GPU visible (nvidia-smi): --perf needs a GPU host")
        return None
    sizes = f"-b 8 -e {shlex.quote(max_bytes)} -f 2 -g {gpus}"
    nvlink = _all_reduce_perf(run, report, "nccl-tests", f"{NCCL_DEBUG} all_reduce_perf {sizes}")
    if nvlink is None:
        return None
    result, text = nvlink
    thresholds = {instance_type: threshold} if threshold is not None else None
    report.findings.append(nccl_tests.check_bandwidth(result, instance_type, thresholds, nodes=1))
    if gpus > 1:
        forced = " ".join(f"{k}={v}" for k, v in nccl_tests.NETWORK_ONLY_ENV.items())
        command = f"{forced} {NCCL_DEBUG} all_reduce_perf {sizes}"
        network = _all_reduce_perf(run, report, "nccl-tests through the network", command)
        if network is None:
            return result
        report.findings.append(nccl_tests.check_network_bandwidth(network[0], instance_type))
        text = network[1]
    report.findings.extend(
        network_findings(nccl_log.parse(text), efa_devices(run), gdr_over_efa(instance_type))
    )
    return result


def _all_reduce_perf(
    run: Run, report: Report, check: str, command: str
) -> tuple[nccl_tests.PerfRun, str] | None:
    """One all_reduce_perf run: its parsed result and output, its finding in the report."""
    output = run(command)
    text = output.stdout + output.stderr
    try:
        result = nccl_tests.parse(text)
    except nccl_tests.ParseError as exc:
        report.add(check, False, f"{command}: {exc}")
        return None
    report.add(
        check,
        output.rc == 0 and result.ok,
        f"all_reduce_perf on {len(result.devices)} GPUs: {len(result.rows)} sizes, out of "
        f"bounds {result.out_of_bounds}, avg busbw {result.avg_busbw}",
    )
    return result, text
