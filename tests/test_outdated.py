"""`efa-image lock outdated` against local indexes: PyPI's and GitHub's JSON shapes,
Debian's Sources.xz and a mirror's index.json, served by tests/httpfixture.py."""

import json
import lzma
import socket
import textwrap

import pytest

from efa_image import cli
from efa_image.artifacts import outdated
from httpfixture import serve

SHA = "a" * 64


def closed_port_url() -> str:
    """A URL on which nothing listens: connection refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def pypi_json(releases: dict[str, list[dict]]) -> bytes:
    return json.dumps({"info": {"name": "x"}, "releases": releases}).encode()


def wheel_file(yanked: bool = False) -> dict:
    return {"filename": "x.whl", "yanked": yanked}


@pytest.fixture
def server():
    with serve() as state:
        state.add(
            "pypi/nvidia-nccl-cu12/json",
            pypi_json(
                {
                    "2.30.4": [wheel_file()],
                    "2.30.7": [wheel_file()],
                    # A pre-release is never the newest; nor is a yanked release.
                    "2.33.0rc1": [wheel_file()],
                    "2.32.9": [wheel_file(yanked=True)],
                    "2.32.3": [wheel_file()],
                    "2.31.0": [],
                }
            ),
        )
        state.add("pypi/torch/json", pypi_json({"2.5.1": [wheel_file()], "2.5.1.dev3": []}))
        state.add(
            "gh/repos/aws/aws-ofi-nccl/releases/latest",
            json.dumps({"tag_name": "v1.21.1", "prerelease": False}).encode(),
        )
        # NVIDIA/nccl-tests publishes no releases: the tags answer (404 above them).
        state.add(
            "gh/repos/NVIDIA/nccl-tests/tags?per_page=100",
            json.dumps(
                [{"name": "v2.19.6"}, {"name": "v2.20.0-rc1"}, {"name": "v2.17.6"}]
            ).encode(),
        )
        sources = textwrap.dedent("""\
            Package: libfabric
            Binary: libfabric1
            Version: 2.1.0-1.1

            Package: metis
            Version: 5.1.0.dfsg-7

            Package: libfabric
            Version: 2.3.0-1
            """)
        state.add("debian/dists/unstable/main/source/Sources.xz", lzma.compress(sources.encode()))
        yield state


def write_lock(tmp_path, server) -> str:
    pool = f"{server.url}/files/debian/pool/main"
    path = tmp_path / "versions.yml"
    path.write_text(
        textwrap.dedent(f"""\
        efa_image_artifacts:
          nccl_wheel:
            kind: wheel
            version: "2.30.7"
            role: nccl
            filename: nvidia_nccl_cu12-{{version}}-py3-none-manylinux_2_18_x86_64.whl
            urls: ["https://files.pythonhosted.org/packages/50/32/nvidia_nccl_cu12-{{version}}-py3-none-manylinux_2_18_x86_64.whl"]
            sha256: "{SHA}"
          aws_ofi_nccl:
            version: "1.19.0"
            role: aws_ofi_nccl
            filename: aws-ofi-nccl-{{version}}.tar.gz
            urls: ["https://github.com/aws/aws-ofi-nccl/releases/download/v{{version}}/aws-ofi-nccl-{{version}}.tar.gz"]
            sha256: "{SHA}"
          nccl_tests:
            version: "2.19.6"
            role: nccl_tests
            filename: nccl-tests-{{version}}.tar.gz
            urls: ["https://github.com/NVIDIA/nccl-tests/archive/v{{version}}.tar.gz"]
            sha256: "{SHA}"
          libfabric:
            version: "2.1.0"
            role: efa
            filename: libfabric_{{version}}.orig.tar.xz
            urls: ["{pool}/libf/libfabric/libfabric_{{version}}.orig.tar.xz"]
            sha256: "{SHA}"
          metis:
            version: "5.1.0"
            role: metis
            filename: metis_{{version}}.dfsg.orig.tar.xz
            urls: ["{pool}/m/metis/metis_{{version}}.dfsg.orig.tar.xz"]
            sha256: "{SHA}"
          efa_installer:
            version: "1.50.0"
            role: efa
            filename: aws-efa-installer-{{version}}.tar.gz
            urls: ["https://efa-installer.amazonaws.com/aws-efa-installer-{{version}}.tar.gz"]
            sha256: "{SHA}"
          pytorch:
            kind: wheelset
            version: "2.5.1"
            role: pytorch
            resolve:
              requirements: ["torch=={{version}}"]
              python: "3.11"
              platform: manylinux_2_28_x86_64
            wheels:
              - filename: torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl
                urls: ["https://files.pythonhosted.org/packages/d1/torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl"]
                sha256: "{SHA}"
              - filename: sympy-1.13.1-py3-none-any.whl
                urls: ["https://files.pythonhosted.org/packages/b2/sympy-1.13.1-py3-none-any.whl"]
                sha256: "{SHA}"
        """)
    )
    return str(path)


def run(capsys, *argv):
    status = cli.main(["lock", "outdated", *argv])
    return status, capsys.readouterr().out


def by_name(out: str) -> dict[str, dict]:
    return {report["name"]: report for report in json.loads(out)}


def test_every_entry_against_its_index(server, tmp_path, capsys):
    lock_path = write_lock(tmp_path, server)
    status, out = run(
        capsys,
        "--lock",
        lock_path,
        "--json",
        "--pypi-url",
        f"{server.url}/files/pypi",
        "--github-url",
        f"{server.url}/files/gh",
    )
    assert status == 0
    reports = by_name(out)
    # PyPI: the pre-release 2.33.0rc1 and the yanked 2.32.9 are not the newest.
    assert reports["nccl_wheel"] == {
        "name": "nccl_wheel",
        "pinned": "2.30.7",
        "newest": "2.32.3",
        "source": "pypi:nvidia-nccl-cu12",
        "status": "outdated",
        "detail": "",
    }
    assert (reports["aws_ofi_nccl"]["newest"], reports["aws_ofi_nccl"]["status"]) == (
        "1.21.1",
        "outdated",
    )
    assert reports["aws_ofi_nccl"]["source"] == "github:aws/aws-ofi-nccl"
    # No releases: the tags, v2.20.0-rc1 left out.
    assert (reports["nccl_tests"]["newest"], reports["nccl_tests"]["status"]) == (
        "2.19.6",
        "current",
    )
    # Debian: upstream part of the newest version (revision and +dfsg dropped).
    assert (reports["libfabric"]["newest"], reports["libfabric"]["status"]) == (
        "2.3.0-1",
        "outdated",
    )
    assert reports["libfabric"]["source"] == "debian:libfabric"
    assert reports["metis"]["status"] == "current"
    # Fetched once for both Debian entries.
    assert server.hits["GET /files/debian/dists/unstable/main/source/Sources.xz"] == 1
    assert reports["efa_installer"]["status"] == "unknown"
    assert reports["efa_installer"]["source"] == "no index for efa-installer.amazonaws.com"
    # A wheel set counts once, asked about by its first requirement's project.
    assert "pytorch/torch" not in reports and "pytorch/sympy" not in reports
    assert reports["pytorch"]["source"] == "pypi:torch"
    assert reports["pytorch"]["status"] == "current"


def test_an_unreachable_source_makes_its_entries_unknown_and_no_others(server, tmp_path, capsys):
    lock_path = write_lock(tmp_path, server)
    status, out = run(
        capsys,
        "--lock",
        lock_path,
        "--pypi-url",
        f"{server.url}/files/pypi",
        "--github-url",
        closed_port_url(),
        "--timeout",
        "2",
        "--fail-on-outdated",
    )
    lines = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert "unknown" in lines["aws_ofi_nccl"] and "(unreachable: " in lines["aws_ofi_nccl"]
    assert "cannot connect" in lines["nccl_tests"] and "Traceback" not in out
    assert lines["nccl_wheel"].split()[1:4] == ["2.30.7", "2.32.3", "outdated"]
    # --fail-on-outdated: something is outdated.
    assert status == 1


def test_a_mirrors_index_answers_for_every_entry(server, tmp_path, capsys):
    lock_path = write_lock(tmp_path, server)
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    index = [
        {"name": "nccl_wheel", "version": "2.30.7", "path": "nccl_wheel/2.30.7/x.whl"},
        {"name": "aws_ofi_nccl", "version": "1.21.1", "path": "aws_ofi_nccl/1.21.1/a.tar.gz"},
        {"name": "aws_ofi_nccl", "version": "1.19.0", "path": "aws_ofi_nccl/1.19.0/a.tar.gz"},
    ]
    (mirror / "index.json").write_text(json.dumps(index))
    status, out = run(
        capsys, "--lock", lock_path, "--mirror", str(mirror), "--json", "--name", "aws_ofi_nccl"
    )
    assert status == 0
    assert by_name(out) == {
        "aws_ofi_nccl": {
            "name": "aws_ofi_nccl",
            "pinned": "1.19.0",
            "newest": "1.21.1",
            "source": "mirror:aws_ofi_nccl",
            "status": "outdated",
            "detail": "",
        }
    }
    # Over HTTP too; an entry the mirror lacks is unknown, not an error.
    server.add("m/index.json", json.dumps(index).encode())
    status, out = run(capsys, "--lock", lock_path, "--mirror", f"{server.url}/files/m", "--json")
    reports = by_name(out)
    assert reports["nccl_wheel"]["status"] == "current"
    assert (reports["metis"]["status"], reports["metis"]["detail"]) == (
        "unknown",
        "no release found",
    )


@pytest.mark.parametrize(
    ("candidates", "pinned", "expected"),
    [
        (["v1.21.1", "v1.22.0-rc1", "v1.20.0"], "1.19.0", "v1.21.1"),
        (["2.0.0rc1", "1.9"], "2.0.0b1", "2.0.0rc1"),  # a pre-release pin admits them
        (["2.0.0.dev1", "latest"], "1.0", None),
    ],
)
def test_newest_leaves_pre_releases_out(candidates, pinned, expected):
    assert outdated.newest(candidates, pinned) == expected


def test_debian_versions_compare_by_their_upstream_part():
    assert outdated.parse_version("1:5.1.0.dfsg-7", debian=True) == outdated.Version("5.1.0")
    assert outdated.parse_version("2.1.0-1.1", debian=True) == outdated.Version("2.1.0")
    assert outdated.parse_version("v2.30.7-1") == outdated.parse_version("2.30.7-1")
