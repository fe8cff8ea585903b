"""The common role's installed state: toolchain present, recorded, and working."""

import pytest

BUILD_PACKAGES = [
    "build-essential",
    "autoconf",
    "automake",
    "libtool",
    "pkg-config",
    "file",
    "patch",
    "xz-utils",
    "bzip2",
]


@pytest.mark.parametrize("name", BUILD_PACKAGES)
def test_build_package_installed(host, name):
    assert host.package(name).is_installed


def test_record_lists_what_the_base_lacked(host):
    record = host.file("/var/lib/efa-image/build-packages.txt")
    assert record.exists and record.user == "root" and record.mode == 0o644
    recorded = record.content_string.split()
    assert recorded == sorted(recorded)
    # The bootstrapped base has none of the toolchain, so all of it is recorded;
    # python3 came with the base and must never be.
    assert {"build-essential", "autoconf", "libtool"} <= set(recorded)
    assert "python3" not in recorded
    assert set(recorded) <= set(BUILD_PACKAGES)


def test_baseline_holds_the_base_and_not_the_toolchain(host):
    baseline = host.file("/var/lib/efa-image/baseline-packages.txt")
    assert baseline.exists and baseline.mode == 0o644
    packages = set(baseline.content_string.split())
    assert {"python3", "python3-apt", "ca-certificates", "dpkg"} <= packages
    assert not packages & {"gcc", "build-essential", "autoconf", "make"}


@pytest.mark.parametrize("path", ["/var/tmp/efa-image-build", "/var/lib/efa-image"])
def test_directories(host, path):
    directory = host.file(path)
    assert directory.is_directory
    assert directory.user == "root"
    assert directory.mode == 0o755


def test_autotools_regenerate_a_project(host):
    # libfabric's Debian tarball needs ./autogen.sh: autoreconf must work end to end.
    script = (
        "set -e; d=$(mktemp -d); cd $d;"
        " printf 'AC_INIT([t],[1])\\nAM_INIT_AUTOMAKE([foreign])\\nLT_INIT\\n"
        "AC_PROG_CC\\nAC_CONFIG_FILES([Makefile])\\nAC_OUTPUT\\n' > configure.ac;"
        " printf 'lib_LTLIBRARIES=libt.la\\nlibt_la_SOURCES=t.c\\n' > Makefile.am;"
        " echo 'int t(void){return 1;}' > t.c;"
        " autoreconf -fi >/dev/null 2>&1 && ./configure -q && make -s >/dev/null 2>&1;"
        " test -f .libs/libt.so && echo built; rm -rf $d"
    )
    result = host.run("bash -c %s", script)
    assert result.rc == 0, result.stderr
    assert result.stdout.strip() == "built"
