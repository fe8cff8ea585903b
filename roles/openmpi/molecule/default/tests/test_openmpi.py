"""Open MPI from source over libfabric: OFI MTL built, allreduce over the tcp provider."""

import json
import re

import pytest

from efa_image.artifacts import context

LOCK = context.role_lock("portable")
OPENMPI = LOCK.get("openmpi")
PREFIX = "/opt/amazon/openmpi"
CHECK = "/opt/efa-image/bin/mpi_allreduce_check"
# Open MPI's OFI MTL excludes tcp by default; without EFA, this selects it.
OFI_TCP = "--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tcp"


@pytest.fixture(scope="module")
def program(host):
    """The self-check the role compiles into the image (it outlives the toolchain)."""
    check = host.file(CHECK)
    assert check.is_file and check.mode & 0o111
    assert "not found" not in host.check_output(f"ldd {CHECK}")
    return CHECK


def test_version_and_ofi_mtl(host):
    info = host.check_output(f"{PREFIX}/bin/ompi_info")
    assert f"Open MPI: {OPENMPI.version}" in info
    assert "MCA mtl: ofi" in info


def test_libraries_resolve(host):
    for library in ("libmpi.so", "openmpi/mca_mtl_ofi.so"):
        path = f"{PREFIX}/lib/{library}"
        if host.file(path).exists:
            assert "not found" not in host.check_output(f"ldd {path}")
    assert "/opt/amazon/efa/lib/libfabric.so.1" in host.check_output(
        f"ldd {PREFIX}/lib/libmpi.so || ldd {PREFIX}/lib/openmpi/mca_mtl_ofi.so"
    )


def test_allreduce_on_two_ranks_through_the_ofi_mtl(host, program):
    result = host.run(
        f"bash -lc '{PREFIX}/bin/mpirun -np 2 {OFI_TCP} --mca mtl_base_verbose 10 {program}'"
    )
    assert result.rc == 0, result.stdout + result.stderr
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("rank "))
    assert [line.split(" on ")[0] for line in lines] == ["rank 0 of 2", "rank 1 of 2"]
    assert all(line.endswith("sum 3 expected 3") for line in lines)
    # pml cm cannot run without its MTL; both ranks report selecting the OFI MTL,
    # which mtl_ofi_provider_include limits to libfabric's tcp provider.
    selected = re.findall(r"\(\s*mtl\) Selected component \[ofi\]", result.stdout + result.stderr)
    assert len(selected) == 2


def test_mpirun_as_root_from_the_image_environment(host, program):
    env = json.loads(host.file("/opt/efa-image/env.d/20-openmpi.json").content_string)
    assert env["path"] == [f"{PREFIX}/bin", "/opt/efa-image/bin"]
    assert env["env"] == {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    # As docker run would: no login shell, only the image's ENV.
    variables = " ".join(f"{k}={v}" for k, v in env["env"].items())
    result = host.run(f"env {variables} PATH={PREFIX}/bin:/usr/bin:/bin mpirun -n 1 uname -n")
    assert result.rc == 0, result.stderr
    assert result.stdout.strip()


def test_container_defaults_in_their_own_block(host):
    params = host.file(f"{PREFIX}/etc/openmpi-mca-params.conf").content_string
    assert "# BEGIN efa-image openmpi role: container defaults" in params
    assert "btl_tcp_if_exclude = lo,docker0" in params
    # libfabric's fork safety in every rank, on every node (playbooks/group_vars/all/profile.yml).
    assert "mca_base_env_list = FI_EFA_FORK_SAFE=1;RDMAV_FORK_SAFE=1" in params


def test_record_and_no_build_tree(host):
    inputs = json.loads(host.file(f"{PREFIX}/.efa-image-installed").content_string)["inputs"]
    assert inputs["artifact"]["version"] == OPENMPI.version
    assert inputs["artifact"]["sha256"] == OPENMPI.sha256
    assert "--with-ofi=/opt/amazon/efa" in inputs["steps"][0]
    # The checksum of the libfabric it links against is an input of the build.
    libfabric = "/opt/amazon/efa/lib/libfabric.so.1"
    assert inputs["linked"] == {libfabric: host.file(host.file(libfabric).linked_to).sha256sum}
    assert not host.file("/var/tmp/efa-image-build/openmpi").exists


def test_manifest_names_every_component_with_its_source(host):
    manifest = json.loads(host.file("/opt/efa-image/manifest.json").content_string)
    assert manifest["flavor"] == "efa" and manifest["profile"] == "portable"
    assert manifest["base_image"] == "efa-image/base:debian12"
    assert manifest["built"].endswith("Z")
    components = {c["name"]: c for c in manifest["components"]}
    assert set(components) == {"efa", "openmpi"}
    for name, artifact in (("efa", LOCK.get("libfabric")), ("openmpi", OPENMPI)):
        assert components[name]["method"] == "source"
        assert components[name]["version"] == artifact.version
        assert components[name]["sha256"] == artifact.sha256
        assert components[name]["source"] == artifact.urls[0]
