"""GDRCopy: where it is selected, its lock entry, the role's verifier and the
image/host verification (efa_image.verification.gdrcopy).

The molecule scenario (roles/gdrcopy/molecule/default) builds and checks a real
library where the mirror holds the archive; here the judgements are tested on
what a good, a broken or a skewed installation would show.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from efa_image.artifacts import lock
from efa_image.building import flavors
from efa_image.verification import gdrcopy, verify
from fakerun import fake

ROOT = Path(__file__).resolve().parents[1]
ROLE_CHECK = "roles/gdrcopy/files/gdrcopy_check.py"
COMMON_FILES = ROOT / "roles/common/files"
HEADER = """\
#define MAJOR_VERSION_SHIFT     16
#define GDR_API_MAJOR_VERSION    2
#define GDR_API_MINOR_VERSION    6
#define GDR_API_VERSION ((GDR_API_MAJOR_VERSION << MAJOR_VERSION_SHIFT) | GDR_API_MINOR_VERSION)
#define MINIMUM_GDRDRV_MAJOR_VERSION    2
"""


@pytest.fixture
def catalog(root):
    return flavors.load_catalog(root / "playbooks/group_vars/all/flavors.yml")


@pytest.fixture
def loaded(root):
    return lock.load(root / "playbooks/group_vars/all/versions.yml")


# Selection: the flavours where AWS ships it, not the reduced ones (the CI mirror
# has no GitHub archive), before aws-ofi-nccl, which dlopens it.


@pytest.mark.parametrize("flavor", ["efa", "sagemaker"])
def test_full_flavours_hold_gdrcopy_before_the_plugin(catalog, flavor):
    roles = catalog.flavors[flavor]
    assert roles.index("nccl") < roles.index("gdrcopy") < roles.index("aws_ofi_nccl")


@pytest.mark.parametrize("flavor", ["efa-reduced", "sagemaker-reduced"])
def test_reduced_flavours_leave_gdrcopy_out(catalog, flavor):
    assert "gdrcopy" not in catalog.flavors[flavor]


def test_every_profile_builds_gdrcopy_from_source(catalog):
    assert {name: methods["gdrcopy"] for name, methods in catalog.profiles.items()} == {
        name: "source" for name in catalog.profiles
    }


@pytest.mark.parametrize("profile", ["aws", "upstream", "portable", "distro"])
def test_gdrcopy_archive_is_needed_by_the_efa_flavour_only_in_full(catalog, loaded, profile):
    assert "gdrcopy" in {a.name for a in catalog.needed(loaded, "efa", profile)}
    assert "gdrcopy" in {a.name for a in catalog.needed(loaded, "sagemaker", profile)}
    assert "gdrcopy" not in {a.name for a in catalog.needed(loaded, "efa-reduced", profile)}


def test_lock_entry_is_the_pinned_tag_archive(loaded):
    entry = loaded.artifacts["gdrcopy"]
    assert (entry.version, entry.role, entry.filename) == ("2.6", "gdrcopy", "gdrcopy-2.6.tar.gz")
    assert list(entry.urls) == ["https://github.com/NVIDIA/gdrcopy/archive/refs/tags/v2.6.tar.gz"]
    assert entry.sha256 == "c9eaf0593567ac5765d04c48cf7923dacb2644240b35bb5f025edb3bde1d5b4f"


# The role's verifier (files/gdrcopy_check.py), in the target's system Python.


@pytest.fixture(scope="module")
def role_check():
    # The script imports common's library_check, which the role sends with it.
    if str(COMMON_FILES) not in sys.path:
        sys.path.append(str(COMMON_FILES))
    path = ROOT / ROLE_CHECK
    spec = importlib.util.spec_from_file_location("gdrcopy_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("version", "api"),
    [("2.6", "2.6"), ("2.5.1", "2.5"), ("v2.4.4", "2.4"), ("2.10", "2.10"), ("two", None)],
)
def test_role_check_reads_the_api_version_of_a_release(role_check, version, api):
    assert role_check.major_minor(version) == api


def test_role_check_reads_the_header_version(role_check):
    assert role_check.header_version(HEADER) == "2.6"
    assert role_check.header_version("/* GDR_API_MAJOR_VERSION 2 */\n") is None


def test_role_check_reports_missing_headers_and_library(role_check, tmp_path, capsys):
    arguments = ["--library", str(tmp_path / "libgdrapi.so"), "--include", str(tmp_path)]
    assert role_check.main([*arguments, "--version", "2.6"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert problems[0] == f"{tmp_path}/gdrapi.h is missing"
    assert problems[1] == f"{tmp_path}/gdrconfig.h is missing"
    assert problems[2].startswith(f"dlopen({tmp_path / 'libgdrapi.so'}) failed")


def test_role_check_reports_a_header_of_another_version(role_check, tmp_path, capsys):
    (tmp_path / "gdrapi.h").write_text(HEADER)
    (tmp_path / "gdrconfig.h").write_text("")
    arguments = ["--library", str(tmp_path / "none.so"), "--include", str(tmp_path)]
    assert role_check.main([*arguments, "--version", "2.5.2"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert problems[0] == f"{tmp_path}/gdrapi.h declares GDR_API version 2.6, not 2.5"


def test_role_check_runs_as_the_role_runs_it(tmp_path):
    """python3 -c <common's library_check.py> <the script> ARGS (vars/main.yml)."""
    (tmp_path / "gdrapi.h").write_text(HEADER)
    (tmp_path / "gdrconfig.h").write_text("")
    command = [sys.executable, "-c", (COMMON_FILES / "library_check.py").read_text()]
    command += [(ROOT / ROLE_CHECK).read_text(), "--library", "libc.so.6"]
    command += ["--include", str(tmp_path), "--version", "2.6"]
    proc = subprocess.run(command, capture_output=True, text=True, check=False, cwd=tmp_path)
    result = json.loads(proc.stdout)
    assert (proc.returncode, result["header_version"], result["want"]) == (1, "2.6", "2.6")
    assert Path(result["loaded"]).name.startswith("libc.so")
    assert result["problems"] == [
        f"{result['loaded']} lacks gdr_open, gdr_pin_buffer, gdr_runtime_get_version,"
        " gdr_driver_get_version"
    ]


# Versions, headers and the host's gdrdrv (efa_image.verification.gdrcopy).


@pytest.mark.parametrize(
    ("text", "version"),
    [("2.6\n", (2, 6)), ("2.5.1", (2, 5)), ("v2.4.4", (2, 4)), ("2.10", (2, 10)), ("", None)],
)
def test_parse_version(text, version):
    assert gdrcopy.parse_version(text) == version


def test_header_version():
    assert gdrcopy.header_version(HEADER) == (2, 6)
    assert gdrcopy.header_version(HEADER.replace("MINOR", "MINUS")) is None


def test_no_gdrdrv_is_a_note_never_a_pass():
    finding = gdrcopy.gdrdrv_finding(None, "2.6")
    assert finding.ok is None
    assert finding.detail == "gdrdrv not loaded (HARDWARE: GPU hosts only)"


def test_gdrdrv_older_than_the_library_warns_and_names_gin():
    # aws/aws-ofi-nccl#1350: a p5en AMI's gdrdrv 2.4 under a container's libgdrapi 2.5.2.
    finding = gdrcopy.gdrdrv_finding("2.4\n", "2.5.2")
    assert finding.ok is None and finding.detail.startswith("warning: ")
    assert "gdrdrv 2.4 is older than the image's libgdrapi 2.5" in finding.detail
    assert "aws/aws-ofi-nccl#1350" in finding.detail
    assert "GPU-initiated networking needs 2.5" in finding.detail
    # Both below 2.5 or both above: older, but GIN is not what it costs.
    assert "GPU-initiated" not in gdrcopy.gdrdrv_finding("2.5", "2.6").detail
    assert "older" in gdrcopy.gdrdrv_finding("2.5", "2.6").detail


@pytest.mark.parametrize("driver", ["2.6", "2.6\n", "2.7", "3.0"])
def test_gdrdrv_the_same_or_newer_passes(driver):
    finding = gdrcopy.gdrdrv_finding(driver, "2.6")
    assert finding.ok is True and "not older than libgdrapi 2.6" in finding.detail


def test_gdrdrv_version_compares_numbers_not_strings():
    assert gdrcopy.gdrdrv_finding("2.10", "2.6").ok is True
    assert gdrcopy.gdrdrv_finding("2.6", "2.10").ok is None


def test_unreadable_gdrdrv_version_is_a_warning():
    finding = gdrcopy.gdrdrv_finding("unknown", "2.6")
    assert finding.ok is None and finding.detail.startswith("warning: cannot compare")


# verify.verify_gdrcopy on an image: what the checks see, faked.

LDCONFIG = (
    "\tlibgdrapi.so.2 (libc6,x86-64) => /opt/gdrcopy/lib/libgdrapi.so.2\n"
    "\tlibgdrapi.so (libc6,x86-64) => /opt/gdrcopy/lib/libgdrapi.so\n"
)
LDD = "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x1)\n"
COMPONENT = {"name": "gdrcopy", "method": "source", "version": "2.6", "prefix": "/opt/gdrcopy"}


def image(gdrdrv=None, **overrides):
    manifest = json.dumps({"components": [{"name": "efa", "version": "2.1.0"}, COMPONENT]})
    responses = {
        "cat /opt/efa-image/manifest.json": (0, manifest, ""),
        "ldconfig -p": (0, LDCONFIG, ""),
        "ldd /opt/gdrcopy/lib/libgdrapi.so.2": (0, LDD, ""),
        "python3 -c": (0, "True\n", ""),
        "test -f /opt/gdrcopy/include/": (0, "", ""),
        "cat /opt/gdrcopy/include/gdrapi.h": (0, HEADER, ""),
        gdrcopy.GDRDRV_VERSION: (0, gdrdrv, "") if gdrdrv else (1, "", ""),
    }
    responses.update(overrides)
    return fake(responses)


def test_an_image_with_gdrcopy_passes_as_aws_checks_it_and_notes_the_missing_module():
    report = verify.Report("no-device", "test")
    verify.verify_gdrcopy(image(), report)
    judged = {f.check: f.ok for f in report.findings}
    assert judged == {
        "gdrcopy linker cache": True,
        "gdrcopy shared libraries": True,
        "gdrcopy symbols": True,
        "gdrcopy headers": True,
        "gdrdrv (host)": None,
    }
    assert "note gdrdrv (host): gdrdrv not loaded (HARDWARE: GPU hosts only)" in report.render()


def test_on_a_gpu_host_an_older_gdrdrv_is_a_warning_and_the_same_one_passes():
    report = verify.Report("hardware", "test")
    verify.verify_gdrcopy(image(gdrdrv="2.4\n"), report)
    assert report.findings[-1].ok is None and "warning" in report.findings[-1].detail
    report = verify.Report("hardware", "test")
    verify.verify_gdrcopy(image(gdrdrv="2.6\n"), report)
    assert report.findings[-1].ok is True


def test_a_broken_gdrcopy_fails_each_check_and_says_why():
    report = verify.Report("no-device", "test")
    run = image(
        **{
            "ldconfig -p": (0, LDCONFIG.splitlines()[0] + "\n", ""),
            "ldd /opt/gdrcopy/lib/libgdrapi.so.2": (0, LDD + "\tlibfoo.so.1 => not found\n", ""),
            "python3 -c": (1, "", "AttributeError: undefined symbol: gdr_pin_buffer\n"),
            "test -f /opt/gdrcopy/include/": (1, "", ""),
        }
    )
    verify.verify_gdrcopy(run, report)
    failed = {f.check: f.detail for f in report.findings if f.ok is False}
    assert failed == {
        "gdrcopy linker cache": "not listed: libgdrapi.so",
        "gdrcopy shared libraries": "not found: libfoo.so.1",
        "gdrcopy symbols": "ctypes: AttributeError: undefined symbol: gdr_pin_buffer",
        "gdrcopy headers": "missing in /opt/gdrcopy/include: gdrapi.h, gdrconfig.h",
    }


def test_a_header_of_another_version_than_the_manifest_fails():
    report = verify.Report("no-device", "test")
    verify.verify_gdrcopy(
        image(**{"cat /opt/gdrcopy/include/gdrapi.h": (0, HEADER.replace("  6", "  5"), "")}),
        report,
    )
    headers = next(f for f in report.findings if f.check == "gdrcopy headers")
    assert headers.ok is False and headers.detail == "gdrapi.h 2.5, manifest 2.6"


def test_an_image_without_gdrcopy_gets_no_gdrcopy_findings():
    report = verify.Report("no-device", "test")
    manifest = json.dumps({"components": [{"name": "efa", "version": "2.1.0"}]})
    verify.verify_gdrcopy(fake({"cat /opt/efa-image/manifest.json": (0, manifest, "")}), report)
    assert report.findings == []
