"""`efa-image build --profile distro`: the distribution's libfabric, rdma-core and Open MPI.

One build of efa-reduced on Debian 13 (nothing compiles but the MPI self-check;
NCCL from the CI mirror's wheel). `efa-image build` verifies before it tags:
the no-device EFA checks, the image ENV, the compatibility rules and the
two-container MPI job through the OFI MTL; these tests read what it reported
and what the image holds. Debian 12's refusal is the efa role's molecule
scenario package_refused (before any change, in a container of that base).
"""

from __future__ import annotations

import json

import pytest
from imagebuild import REPOSITORY, build_and_report, in_image


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    report = tmp_path_factory.mktemp("distro") / "report.json"
    return build_and_report(report, flavor="efa-reduced", profile="distro")


def test_it_was_verified_with_the_ofi_mtl_across_two_containers(built):
    output = built["output"]
    assert "EFA verification, mode no-device" in output
    assert "ok   efa provider built: fi_info -l: efa" in output
    assert "ok   libfabric links libefa: libefa.so.1 linked" in output
    assert "ok   image ENV: matches env.d" in output
    assert "MPI allreduce on 2 hosts through the OFI MTL (tcp)" in output
    assert "OFI MTL selected by 2 ranks, providers tcp, tcp; mpirun exit 0" in output
    assert "nccl-2.19-needs-distro-libfabric-1.19.1" in output  # the distro's libfabric judged
    assert f"{REPOSITORY}:efa-reduced-distro" in built["tags"]
    # Nothing compiles: no component goes through the build cache but the wheel's 'off'.
    assert set(built["build_cache"].values()) <= {"off"}


def test_libfabric_is_debians_2_1_0_with_efa(built):
    proc = in_image(
        built["image"],
        "command -v fi_info; fi_info --version; fi_info -l | grep -x efa:;"
        " dpkg-query -W -f '${Version}\\n' libfabric1;"
        " ldd /usr/lib/x86_64-linux-gnu/libfabric.so.1 | grep -c libefa.so.1",
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("\n")
    assert lines[0] == "/usr/bin/fi_info"
    assert "libfabric: 2.1.0" in lines and "efa:" in lines
    assert any(line.startswith("2.1.0-") for line in lines)
    assert in_image(built["image"], "test -e /opt/amazon/efa").returncode != 0


def test_mpirun_is_debians_5_0_7_over_that_libfabric(built):
    proc = in_image(
        built["image"],
        "readlink -f \"$(command -v mpirun)\"; ompi_info | grep -E 'Open MPI:|MCA mtl: ofi';"
        " dpkg-query -W -f '${Version}\\n' openmpi-bin;"
        " ldd /usr/lib/x86_64-linux-gnu/libmpi.so.40 | grep libfabric.so.1;"
        " grep -c 'efa-image openmpi role' /etc/openmpi/openmpi-mca-params.conf",
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("/usr/bin/mpirun.openmpi\n")
    assert "Open MPI: 5.0.7" in out and "MCA mtl: ofi" in out
    assert "\n5.0.7-" in out
    assert "libfabric.so.1 => /lib/x86_64-linux-gnu/libfabric.so.1" in out
    assert out.rstrip().endswith("\n2")  # the role's block, both markers


def test_the_toolchain_and_mpicc_are_gone(built):
    script = (
        # openmpi-bin ships the mpicc wrapper; without a compiler and mpi.h it cannot compile.
        "! command -v gcc && ! command -v tcc && ! command -v cc && ! command -v make"
        " && test \"$(dpkg-query -W -f '${db:Status-Status}' libopenmpi-dev)\" != installed"
        " && test ! -e /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h"
        " && test ! -e /var/tmp/efa-image-build"
        ' && test -z "$(find /var/lib/apt/lists /var/cache/apt -type f ! -name lock)"'
        " && test -x /opt/efa-image/bin/mpi_allreduce_check"
        " && ldd /opt/efa-image/bin/mpi_allreduce_check | grep -c 'libmpi.so.40 => '"
    )
    proc = in_image(built["image"], script)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "1"  # the self-check links Debian's libmpi
    # The self-check's compiler was the only build install: no toolchain, and
    # libopenmpi-dev (gfortran, perl, autotools, -dev packages) never installed,
    # its headers only unpacked in the build tree.
    removed = built["cleanup"]["removed_packages"]
    assert {"tcc", "libc6-dev"} <= set(removed)
    assert not {"gcc", "libopenmpi-dev", "gfortran-14", "perl"} & set(removed)


def test_the_manifest_names_the_distributions_packages(built):
    manifest = json.loads(
        in_image(built["image"], "cat /opt/efa-image/manifest.json").stdout or "{}"
    )
    components = {c["name"]: c for c in manifest["components"]}
    assert components["efa"]["method"] == "package" and components["efa"]["prefix"] == "/usr"
    assert components["efa"]["version"] == "2.1.0"
    assert components["efa"]["source"].startswith("Debian 13's libfabric1 2.1.0-")
    assert components["openmpi"]["method"] == "package"
    assert components["openmpi"]["version"] == "5.0.7"
    assert components["openmpi"]["prefix"] == "/usr"
    assert manifest["profile"] == "distro"
