import json
from pathlib import Path

from efa_image.types import Finding
from efa_image.verification import nccl_log, verify
from fakerun import fake
from nccl_lines import EFA_LINES

VERSION = "/opt/amazon/efa/bin/fi_info: 2.1.0\nlibfabric: 2.1.0\nlibfabric api: 2.1\n"
PROVIDERS = "efa:\n    version: 201.0\ntcp:\n    version: 201.0\nshm:\n    version: 201.0\n"
LDD = (
    "\tlibefa.so.1 => /lib/x86_64-linux-gnu/libefa.so.1 (0x1)\n"
    "\tlibibverbs.so.1 => /lib/x86_64-linux-gnu/libibverbs.so.1 (0x2)\n"
)
TCP = "provider: tcp\n    fabric: 172.17.0.0/16\n    type: FI_EP_RDM\n    protocol: FI_PROTO_XNET\n"
EFA_HW = (
    "provider: efa\n    fabric: efa\n    domain: rdmap16s27-rdm\n    version: 122.0\n"
    "    type: FI_EP_RDM\n    protocol: FI_PROTO_EFA\n"
)


def base(**overrides):
    responses = {
        "ls -1 /dev/infiniband": (0, "", ""),
        "--version": (0, VERSION, ""),
        "fi_info -l": (0, PROVIDERS, ""),
        "ldd": (0, LDD, ""),
        "-p efa": (1, "", "fi_getinfo: -61 (No data available)\n"),
        "-p tcp": (0, TCP, ""),
    }
    responses.update(overrides)
    return fake(responses)


def test_no_device_mode_checks_the_build_and_says_why():
    report = verify.verify_efa(base(), version="2.1.0")
    assert report.mode == "no-device" and "no /dev/infiniband/uverbs*" in report.reason
    assert report.ok, report.render()
    checks = [f.check for f in report.findings]
    assert "efa without a device" in checks and "libfabric links libefa" in checks
    assert "efa RDM endpoints" not in checks


def test_hardware_mode_requires_efa_rdm_endpoints():
    devices = {"ls -1 /dev/infiniband": (0, "uverbs0\nuverbs1\n", "")}
    good = verify.verify_efa(base(**devices, **{"-p efa": (0, EFA_HW, "")}))
    assert good.mode == "hardware" and "uverbs0, uverbs1" in good.reason and good.ok
    bad = verify.verify_efa(base(**devices))
    assert not bad.ok
    assert "FAIL efa RDM endpoints: 0 with FI_PROTO_EFA" in bad.render()


def test_wrong_version_missing_provider_and_unresolved_library_fail():
    report = verify.verify_efa(
        base(
            **{
                "fi_info -l": (0, "tcp:\n    version: 201.0\n", ""),
                "ldd": (0, LDD + "\tlibnl-3.so.200 => not found\n", ""),
            }
        ),
        version="2.5.1",
    )
    failed = {f.check for f in report.findings if not f.ok}
    assert failed == {"version", "efa provider built", "shared libraries"}
    assert "result: FAILED" in report.render()


def test_efa_failing_for_another_reason_is_not_accepted():
    report = verify.verify_efa(base(**{"-p efa": (1, "", "fi_getinfo: -2 (No such file)\n")}))
    assert not report.ok
    assert "fi_getinfo -2" in report.render()


def test_empty_report_is_not_ok():
    assert not verify.Report("no-device", "nothing ran").ok


MANIFEST = json.dumps(
    {
        "components": [
            {"name": "efa", "method": "source", "version": "2.1.0"},
            {"name": "nccl", "method": "wheel", "version": "2.30.4"},
            {"name": "aws_ofi_nccl", "method": "source", "version": "1.19.0"},
        ]
    }
)


def with_pytorch(loaded: str) -> str:
    """MANIFEST plus the pytorch role's record: the NCCL torch loaded."""
    manifest = json.loads(MANIFEST)
    manifest["components"].append(
        {"name": "pytorch", "version": "2.5.1", "nccl": {"loaded_version": loaded}}
    )
    return json.dumps(manifest)


def test_image_compatibility_from_the_manifest_and_torch():
    """The NCCL torch loads (manifest) must be the image's; the one it was built with
    (torch.cuda.nccl.version()) only must not be newer than the image's."""
    run = fake(
        {
            "cat /opt/efa-image/manifest.json": (0, with_pytorch("2.27.3"), ""),
            verify.TORCH_NCCL: (0, "(2, 21, 5)\n", ""),
        }
    )
    report = verify.Report("no-device", "test")
    result = verify.verify_compat(run, report)
    assert not result.ok
    failed = [f for f in report.findings if not f.ok]
    assert [f.check for f in failed] == ["compatibility torch-nccl-matches-image-nccl"]
    assert "2.27.3" in failed[0].detail and "2.30" in failed[0].detail


def test_torch_built_with_an_older_nccl_than_it_loads_is_compatible():
    run = fake(
        {
            "cat /opt/efa-image/manifest.json": (0, with_pytorch("2.30.4"), ""),
            verify.TORCH_NCCL: (0, "(2, 21, 5)\n", ""),
        }
    )
    report = verify.Report("no-device", "test")
    assert verify.verify_compat(run, report).ok, report.findings
    run = fake(
        {
            "cat /opt/efa-image/manifest.json": (0, with_pytorch("2.30.4"), ""),
            verify.TORCH_NCCL: (0, "(2, 31, 0)\n", ""),
        }
    )
    report = verify.Report("no-device", "test")
    assert not verify.verify_compat(run, report).ok
    failed = [f.check for f in report.findings if not f.ok]
    assert failed == ["compatibility image-nccl-not-older-than-torch-build"], failed


def test_image_without_torch_skips_that_rule():
    run = fake({"cat /opt/efa-image/manifest.json": (0, MANIFEST, "")})
    report = verify.Report("no-device", "test")
    assert verify.verify_compat(run, report).ok
    assert report.findings[-1].ok and "torch-nccl-matches-image-nccl" in report.findings[-1].detail


def test_perf_without_a_gpu_fails_and_says_why():
    report = verify.Report("no-device", "test")
    assert verify.verify_perf(fake({}), report, "p5.48xlarge") is None
    assert not report.ok and "needs a GPU host" in report.findings[0].detail


def test_installer_images_old_and_new_method_names_give_the_same_facts():
    for method in ("efa_installer", "installer"):  # "installer": images before the rename
        components = [
            {"name": "efa", "method": method, "version": "1.28.0"},
            {"name": "nccl", "method": "source", "version": "2.30.4"},
        ]
        manifest = json.dumps({"components": components})
        run = fake({"cat /opt/efa-image/manifest.json": (0, manifest, "")})
        facts = verify.image_facts(run)
        assert facts["efa_method"] == "efa_installer" and facts["efa_installer"] == "1.28.0"
        report = verify.Report("no-device", "test")
        result = verify.verify_compat(run, report)
        assert [v.rule for v in result.violations] == ["nccl-2.19-needs-efa-installer-1.29"]


# --perf judged on what NCCL said (efa_image.verification.nccl_log; the logs: tests/data/gpu, and
# the EFA lines tests/test_nccl_log.py derives from the pinned versions' format strings).
GPU_DATA = Path(__file__).parent / "data" / "gpu"


def perf_run(log: str, devices: str = ""):
    return base(
        **{
            "ls -1 /dev/infiniband": (0, devices, ""),
            "nvidia-smi": (0, "NVIDIA H200\n", ""),
            "all_reduce_perf": (0, log, ""),
        }
    )


def network(report: verify.Report) -> Finding:
    return next(f for f in report.findings if f.check == "NCCL network")


def test_perf_on_the_h200_log_reports_tcp_gdr_disabled_efa_not_used():
    report = verify.Report("no-device", "test")
    log = (GPU_DATA / "h200-all_reduce_perf-plugin-tcp.log").read_text()
    verify.verify_perf(perf_run(log), report, "p5e.48xlarge")
    finding = network(report)
    assert finding.ok is None
    assert finding.detail.startswith("tcp provider, GDR disabled, EFA not used")
    facts = next(f for f in report.findings if f.check == "NCCL and plugin").detail
    for fact in ("NCCL 2.28.9 (CUDA 13.0)", "aws-ofi-nccl 1.19.0", "libfabric 2.1",
                 "provider tcp (1 NICs), protocol SENDRECV", "network Libfabric, GDR disabled",
                 "NCCL_PROTO simple (GDR not supported)", "tuner nccl_ofi_tuner (v3)"):  # fmt: skip
        assert fact in facts, fact
    assert "  note NCCL network: tcp provider, GDR disabled, EFA not used" in report.render()


def test_perf_with_efa_devices_declared_fails_on_the_tcp_provider_and_gdr_off():
    report = verify.Report("hardware", "test")
    log = (GPU_DATA / "h200-all_reduce_perf-plugin-tcp.log").read_text()
    verify.verify_perf(perf_run(log, devices="uverbs0\n"), report, "p5e.48xlarge")
    finding = network(report)
    assert finding.ok is False and not report.ok
    assert "EFA devices present but aws-ofi-nccl selected the tcp provider" in finding.detail
    assert "GDR disabled on an instance type with GPUDirect RDMA over EFA" in finding.detail


def test_perf_with_efa_devices_fails_when_the_plugin_fell_back_to_socket():
    """FI_PROVIDER=efa where the plugin cannot start: 0 wrong values, NCCL over Socket."""
    report = verify.Report("hardware", "test")
    log = (GPU_DATA / "h200-plugin-fi-provider-efa-no-device.log").read_text()
    verify.verify_perf(perf_run(log, devices="uverbs0\n"), report, "p4d.24xlarge")
    assert report.findings[0].ok  # all_reduce_perf itself passed
    finding = network(report)
    assert finding.ok is False
    assert "NCCL used NCCL's Socket transport (the plugin failed to initialise)" in finding.detail


def efa_log(gdr: str = "Enabled") -> str:
    lines = EFA_LINES.replace("GPU Direct RDMA Enabled", f"GPU Direct RDMA {gdr}")
    if gdr != "Enabled":
        lines = lines.replace("/0/GDRDMA", "/0")
    rows = (GPU_DATA / "h200-all_reduce_perf-plugin-tcp.log").read_text().split("#  Rank")[0]
    return rows + lines


def test_efa_with_gdr_on_a_gdr_instance_passes_the_network_check():
    findings = verify.network_findings(nccl_log.parse(efa_log()), ["uverbs0"], True)
    assert findings[0].ok is True and findings[0].detail == "aws-ofi-nccl over efa, GDR enabled"


def test_efa_without_gdr_fails_only_where_the_type_has_it():
    facts = nccl_log.parse(efa_log(gdr="Disabled"))
    assert facts.provider == "efa" and facts.gdr_enabled is False
    assert verify.network_findings(facts, ["uverbs0"], True)[0].ok is False
    # p3dn: EFA without GPUDirect RDMA.
    assert verify.network_findings(facts, ["uverbs0"], verify.gdr_over_efa("p3dn.24xlarge"))[0].ok


def test_nothing_at_info_level_fails_and_names_the_switch():
    findings = verify.network_findings(nccl_log.parse("# Avg bus bandwidth : 1\n"), [], None)
    assert findings[0].ok is False and "NCCL_DEBUG=INFO" in findings[0].detail


def test_perf_on_two_gpus_also_forces_the_network_and_judges_that_run():
    """NVLink first (the nodes_1 floor), then P2P, SHM and NVLS off: the net plugin carries
    the traffic (the network_1 floor) and decides the network verdict."""
    nvlink = (GPU_DATA / "h200-all_reduce_perf-plugin-tcp.log").read_text()
    rows = "\n".join(line for line in nvlink.splitlines() if " NCCL " not in line)
    responses = {
        "ls -1 /dev/infiniband": (0, "uverbs0\n", ""),
        "nvidia-smi": (0, "NVIDIA H100\nNVIDIA H100\n", ""),
        "NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0": (0, rows + EFA_LINES, ""),
        "all_reduce_perf": (0, nvlink, ""),
    }
    report = verify.Report("hardware", "test")
    verify.verify_perf(fake(responses), report, "p5.48xlarge")
    checks = {f.check: f for f in report.findings}
    assert checks["nccl-tests"].ok and checks["nccl-tests through the network"].ok
    assert checks["NCCL network"].ok, checks["NCCL network"]
    network = checks["nccl busbw through the network"]
    assert not network.ok and "floor 100 GB/s for p5.48xlarge on one node" in network.detail
