"""common's package probe (roles/common/files/package-probe.sh): its checks of a file.

The efa role (libfabric has the EFA provider) and the metis role (metis.h's
index width) judge a package with the same script, and so does efa_image.building.distro.
Here the installed-package path runs against a stand-in `dpkg-query` (a generic
fixture on PATH) that lists files written into a temporary directory; the
candidate path (apt's .deb) runs in the molecule scenarios efa/package_refused
and metis/default.
"""

import os
import subprocess
from pathlib import Path

import pytest

from efa_image.building import distro

PROBE = Path(__file__).resolve().parents[1] / "roles/common/files/package-probe.sh"


@pytest.fixture
def installed(tmp_path):
    """A package `pkg` 1.2-3 is installed and holds the files written under tmp_path/root."""
    root = tmp_path / "root"
    (root / "usr/lib").mkdir(parents=True)
    (root / "usr/include").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "dpkg-query"
    stub.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        "  *db:Status-Status*) echo installed ;;\n"
        "  *Version*) echo 1.2-3 ;;\n"
        f"  -L*) find {root} -type f ;;\n"
        "esac\n"
    )
    stub.chmod(0o755)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
        return subprocess.run(
            ["sh", str(PROBE), "pkg", *args], capture_output=True, text=True, env=env
        )

    return root, run


def lines(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert result.returncode == 0, result.stderr
    return dict(line.split(" ", 1) for line in result.stdout.splitlines())


def test_has_needs_every_string_in_the_member(installed):
    root, run = installed
    library = root / "usr/lib/libfabric.so.1.26.0"
    library.write_bytes(b"\x7fELF\0libefa.so.1\0efadv_query_device\0")
    found = lines(run(r"/libfabric\.so\.1", "efa=has:libefa.so.1,efadv_query_device"))
    assert found == {"source": "installed", "version": "1.2-3", "efa": "yes"}
    library.write_bytes(b"\x7fELF\0libefa.so.1\0")  # links libefa, calls no efadv_*
    assert lines(run(r"/libfabric\.so\.1", "efa=has:libefa.so.1,efadv_query_device"))["efa"] == "no"


def test_define_reads_the_macros_value_and_is_empty_without_it(installed):
    root, run = installed
    header = root / "usr/include/metis.h"
    header.write_text("#define IDXTYPEWIDTH 64\n#define REALTYPEWIDTH 32\n")
    checks = ["idx_width=define:IDXTYPEWIDTH", "other=define:NO_SUCH_MACRO"]
    found = lines(run(r"/metis\.h$", *checks))
    assert (found["idx_width"], found["other"]) == ("64", "")
    header.write_text("/* IDXTYPEWIDTH 32 */\n")
    assert lines(run(r"/metis\.h$", *checks))["idx_width"] == ""


def test_a_package_without_the_member_judges_nothing_present(installed):
    _, run = installed
    found = lines(run(r"/nothing\.so$", "efa=has:libefa.so.1", "w=define:X"))
    assert (found["efa"], found["w"]) == ("no", "")


def test_an_unknown_check_is_refused_naming_the_kinds(installed):
    _, run = installed
    result = run(r"/x$", "efa=links:libefa.so.1")
    assert result.returncode == 2
    assert "unknown check efa=links:libefa.so.1 (has:STRINGS or define:MACRO)" in result.stderr


def test_the_cli_passes_the_efa_roles_arguments(installed):
    root, run = installed
    (root / "usr/lib/libfabric.so.1").write_bytes(b"libefa.so.1 efadv_query_device")
    _, *arguments = distro.probe_arguments()  # the stand-in's package is `pkg`
    assert distro.parse_probe(run(*arguments).stdout).efa
