"""METIS from source (CI mirror, 64-bit idx_t) and from Debian's packages (32-bit).

The checks here are written independently of the role's own verifier
(files/metis_check.py), which they also run against wrong expectations to show
that it fails.
"""

import json
import re
from pathlib import Path

import pytest

from efa_image.artifacts import context

METIS = context.role_lock("portable").get("metis")
CHECK = (Path(__file__).parents[3] / "files" / "metis_check.py").read_text()
# The script runs as the role runs it: through common's library_check, both as text.
LIBRARY_CHECK = (Path(__file__).parents[4] / "common" / "files" / "library_check.py").read_text()
# Three triangles in a chain (0-1-2, 3-4-5, 6-7-8, joined by 2-3 and 5-6): the
# one balanced 3-way partition with edge cut 2 keeps each triangle together.
CHAIN = [(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (3, 5), (6, 7), (7, 8), (6, 8), (2, 3), (5, 6)]
PARTITION = """
import ctypes, json, sys
width, edges = int(sys.argv[1]), json.loads(sys.argv[2])
idx = {32: ctypes.c_int32, 64: ctypes.c_int64}[width]
metis = ctypes.CDLL("libmetis.so")
n = 1 + max(max(e) for e in edges)
near = {v: [] for v in range(n)}
for a, b in edges:
    near[a].append(b)
    near[b].append(a)
xadj, adjncy = [0], []
for v in range(n):
    adjncy += sorted(near[v])
    xadj.append(len(adjncy))
part, cut = (idx * n)(), idx(-1)
status = metis.METIS_PartGraphKway(
    ctypes.byref(idx(n)), ctypes.byref(idx(1)), (idx * len(xadj))(*xadj),
    (idx * len(adjncy))(*adjncy), None, None, None, ctypes.byref(idx(3)),
    None, None, None, ctypes.byref(cut), part)
print(json.dumps({"status": status, "edgecut": cut.value, "part": list(part)}))
"""
# METIS_SetDefaultOptions sets METIS_NOPTIONS (40) idx_t to -1: count the int32 it wrote.
OPTIONS_WRITTEN = (
    "import ctypes; o = (ctypes.c_int32 * 80)(*[7] * 80);"
    " ctypes.CDLL('libmetis.so').METIS_SetDefaultOptions(o); print(sum(v == -1 for v in o))"
)


@pytest.fixture
def method(host):
    """The platform's name ends in its method (see converge.yml)."""
    return host.backend.get_hostname().removeprefix("efa-image-metis-")


@pytest.fixture
def layout(method):
    """Library directory, include directory, index width and version per method."""
    if method == "source":
        return "/opt/metis/lib", "/opt/metis/include", 64, METIS.version
    return "/usr/lib/x86_64-linux-gnu", "/usr/include", 32, "5.1.0"


def test_libmetis_so_is_in_the_linker_cache(host, layout):
    libdir, _, _, _ = layout
    listed = re.findall(r"(?m)^\s*libmetis\.so \(.*=> (\S+)$", host.check_output("ldconfig -p"))
    # With merged /usr, ld.so lists /usr/lib/<triplet> as /lib/<triplet>.
    assert [p.removeprefix("/usr") for p in listed] == [
        f"{libdir}/libmetis.so".removeprefix("/usr")
    ]
    assert "not found" not in host.check_output(f"ldd {libdir}/libmetis.so")


def test_header_declares_the_width_and_version(host, layout):
    _, includedir, width, version = layout
    header = host.file(f"{includedir}/metis.h").content_string
    assert re.search(r"(?m)^#define IDXTYPEWIDTH (\d+)$", header).group(1) == str(width)
    parts = [
        re.search(rf"#define METIS_VER_{p}\s+(\d+)", header).group(1)
        for p in ("MAJOR", "MINOR", "SUBMINOR")
    ]
    assert ".".join(parts) == version


def test_library_has_the_width(host, layout):
    _, _, width, _ = layout
    assert int(host.check_output("python3 -c %s", OPTIONS_WRITTEN)) == 40 * width // 32


def test_library_partitions_a_known_graph(host, layout):
    _, _, width, _ = layout
    result = json.loads(
        host.check_output("python3 -c %s %s %s", PARTITION, str(width), json.dumps(CHAIN))
    )
    assert result["status"] == 1 and result["edgecut"] == 2
    part = result["part"]
    assert len({part[0], part[3], part[6]}) == 3
    assert part == [part[0]] * 3 + [part[3]] * 3 + [part[6]] * 3


def run_role_check(host, library, header, width, version):
    """The role's verifier (files/metis_check.py): exit status and its JSON report."""
    result = host.run(
        "python3 -c %s %s --library %s --header %s --width %s --version %s",
        *(LIBRARY_CHECK, CHECK, library, header, str(width), version),
    )
    return result.rc, json.loads(result.stdout)


def test_the_role_verifier_passes_here(host, layout):
    libdir, includedir, width, version = layout
    rc, result = run_role_check(host, "libmetis.so", f"{includedir}/metis.h", width, version)
    assert (rc, result["problems"]) == (0, [])
    assert result["loaded"].removeprefix("/usr").startswith(libdir.removeprefix("/usr") + "/")
    assert result["partition"]["edgecut"] == 1


def test_the_role_verifier_fails_on_the_other_width(host, layout):
    _, includedir, width, version = layout
    other = {32: 64, 64: 32}[width]
    rc, result = run_role_check(host, "libmetis.so", f"{includedir}/metis.h", other, version)
    assert rc == 1
    assert f"has IDXTYPEWIDTH {width}, not {other}" in result["problems"][0]
    assert f"fills options[] as idx_t of {width} bits, not {other}" in result["problems"][1]
    assert "partition" not in result


def test_the_role_verifier_fails_without_the_library(host, layout):
    _, includedir, width, _ = layout
    rc, result = run_role_check(
        host, "/nonexistent/libmetis.so", f"{includedir}/metis.h", width, "5.2.1"
    )
    assert rc == 1
    assert any("is METIS 5.1.0, not 5.2.1" in p for p in result["problems"])
    assert any(p.startswith("dlopen(/nonexistent/libmetis.so) failed") for p in result["problems"])


def test_component_record(host, method, layout):
    _, _, width, version = layout
    record = json.loads(host.file("/opt/efa-image/components/metis.json").content_string)
    assert (record["name"], record["method"], record["version"]) == ("metis", method, version)
    assert record["idx_type_width"] == width
    if method == "source":
        assert (record["sha256"], record["source"]) == (METIS.sha256, METIS.urls[0])
        assert record["prefix"] == "/opt/metis"
    else:
        assert record["source"].startswith("Debian 13 package libmetis5, libmetis-dev 5.1.0.dfsg")
        assert record["sha256"] is None and record["prefix"] == "/usr"


def test_source_install_record_and_layout(host, method):
    if method != "source":
        pytest.skip("the package method has no install record")
    record = json.loads(host.file("/opt/metis/.efa-image-installed").content_string)
    assert record["component"] == "metis"
    inputs = record["inputs"]
    assert inputs["artifact"] == {"name": "metis", "version": METIS.version, "sha256": METIS.sha256}
    assert inputs["idx_type_width"] == 64
    assert inputs["steps"][0][-2:] == ["set-width", "64"]
    assert inputs["steps"][1] == ["make", "config", "shared=1", "cc=gcc", "prefix=/opt/metis"]
    assert host.file("/etc/ld.so.conf.d/efa-image-metis.conf").content_string == "/opt/metis/lib\n"
    # Library and header only: the command-line programs and the build tree are gone.
    assert host.check_output("ls -A /opt/metis").split() == [
        ".efa-image-installed",
        "include",
        "lib",
    ]
    assert not host.file("/var/tmp/efa-image-build/metis").exists


def test_packages_kept_through_cleanup(host, method):
    if method != "package":
        pytest.skip("the source method installs no METIS package")
    manual = host.check_output("apt-mark showmanual").split()
    assert {"libmetis5", "libmetis-dev"} <= set(manual)
    assert not host.file("/etc/ld.so.conf.d/efa-image-metis.conf").exists
