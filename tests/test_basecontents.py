"""Extending a base image: the probe's parsing and which roles use what the base has.

EFA_REDUCED is what data/base-contents-probe.sh printed here for an efa-reduced
image this project built (manifest shortened); DLC is the layout of AWS's PyTorch
training DLC (aws/deep-learning-containers pytorch/training/docker/2.5/py3/cu124/
Dockerfile.gpu): EFA installer in /opt/amazon, NCCL and the plugin in /usr/local,
PyTorch in /opt/conda.
"""

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from efa_image.artifacts.lock import Artifact
from efa_image.building import basecontents, distro, images, plan
from efa_image.building.flavors import load_catalog
from efa_image.errors import EfaImageError
from efa_image.types import BuildRequest

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = (
    '{"components": [{"name": "efa", "method": "source"}, {"name": "openmpi"}, {"name": "nccl"}]}'
)
EFA_REDUCED = f"""manifest {MANIFEST}
efa prefix /opt/amazon/efa
efa version 2.1.0
openmpi prefix /opt/amazon/openmpi
openmpi version 5.0.7
nccl prefix /opt/nccl
nccl version 2.30.4
"""
DLC = """efa prefix /opt/amazon/efa
efa version 1.22.0amzn4.0
efa installer 1.36.0
openmpi prefix /opt/amazon/openmpi
openmpi version 4.1.7
nccl prefix /usr/local
nccl version 2.23.4
aws_ofi_nccl prefix /usr/local
pytorch python /opt/conda/bin/python
pytorch version 2.5.1+cu124
"""
SAGEMAKER = load_catalog().roles("sagemaker-reduced")


def test_an_image_built_here_is_found_through_its_manifest():
    found = basecontents.parse_probe(EFA_REDUCED)
    assert set(found) == {"efa", "openmpi", "nccl"}
    assert found["efa"].prefix == "/opt/amazon/efa" and found["efa"].version == "2.1.0"
    assert {f.recorded_by for f in found.values()} == {"efa-image manifest"}


def test_a_dlc_is_found_by_its_files():
    found = basecontents.parse_probe(DLC)
    assert found["nccl"].prefix == "/usr/local" and found["nccl"].version == "2.23.4"
    assert (
        found["pytorch"].version == "2.5.1"
        and found["pytorch"].detail["python"] == "/opt/conda/bin/python"
    )
    assert found["efa"].detail["installer"] == "1.36.0" and found["efa"].recorded_by == "probe"
    assert "EFA installer 1.36.0" in found["efa"].describe()


def test_a_bare_base_or_an_installer_record_alone_holds_nothing():
    assert basecontents.parse_probe("") == {}
    # No fi_info that runs: the record of a removed installation is not EFA.
    assert basecontents.parse_probe("efa installer 1.36.0\nmanifest {not json\n") == {}


def test_found_components_get_present_and_the_rest_is_installed():
    use = basecontents.base_use(
        basecontents.parse_probe(EFA_REDUCED), SAGEMAKER, {"pytorch": "2.5.1"}
    )
    assert list(use.present) == ["efa", "openmpi", "nccl"]
    assert use.install == ["mpi_ssh", "metis", "rmm", "pytorch", "sagemaker_training"]
    assert use.extra_vars() == (
        "efa_method=present",
        "efa_prefix=/opt/amazon/efa",
        "openmpi_method=present",
        "openmpi_prefix=/opt/amazon/openmpi",
        "nccl_method=present",
        "nccl_prefix=/opt/nccl",
        "openmpi_libfabric_prefix=/opt/amazon/efa",
    )
    assert use.versions() == {"libfabric": "2.1.0", "openmpi": "5.0.7", "nccl": "2.30.4"}
    text = use.render("base:1")
    assert "base image base:1 has efa (2.1.0 in /opt/amazon/efa" in text
    assert text.endswith("to install: mpi_ssh, metis, rmm, pytorch, sagemaker_training")


def test_a_dlcs_pytorch_is_used_when_it_is_the_locked_one():
    found = basecontents.parse_probe(DLC.replace("aws_ofi_nccl prefix /usr/local\n", ""))
    use = basecontents.base_use(found, SAGEMAKER, {"pytorch": "2.5.1"})
    assert "pytorch_python=/opt/conda/bin/python" in use.extra_vars()
    assert use.install == ["mpi_ssh", "metis", "rmm", "sagemaker_training"]


def test_another_pytorch_or_a_role_without_present_is_refused_before_the_build():
    found = basecontents.parse_probe(DLC.replace("aws_ofi_nccl prefix /usr/local\n", ""))
    with pytest.raises(
        EfaImageError, match=r"PyTorch is 2[.]5[.]1 .* the lock pins 2[.]6[.]0.*--no-detect"
    ):
        basecontents.base_use(found, SAGEMAKER, {"pytorch": "2.6.0"})
    roles = load_catalog().roles("sagemaker")
    with_metis = basecontents.parse_probe(DLC + "metis library /usr/local/lib/libmetis.so\n")
    refused = (
        r"has metis .*/usr/local/lib/libmetis.so.*metis role has no present method.*--no-detect"
    )
    with pytest.raises(EfaImageError, match=refused):
        basecontents.base_use(with_metis, roles, {"pytorch": "2.5.1"})


def test_a_dlcs_plugin_is_used_where_the_flavour_has_aws_ofi_nccl():
    found = basecontents.parse_probe(DLC)
    roles = load_catalog().roles("sagemaker")
    use = basecontents.base_use(found, roles, {"pytorch": "2.5.1"})
    assert "aws_ofi_nccl_method=present" in use.extra_vars()
    assert "aws_ofi_nccl_prefix=/usr/local" in use.extra_vars()
    # The probe reads no plugin version: no tag or label claims one.
    assert "aws_ofi_nccl" not in use.versions()
    # GDRCopy is installed although a DLC has it in /usr/local: the probe does
    # not look for it yet (no present method).
    assert use.install == [
        "mpi_ssh",
        "gdrcopy",
        "nccl_tests",
        "metis",
        "rmm",
        "smdistributed",
        "sagemaker_training",
    ]
    # Not in the flavour: what the base has beside it does not matter.
    assert (
        "aws_ofi_nccl" not in basecontents.base_use(found, SAGEMAKER, {"pytorch": "2.5.1"}).present
    )


@pytest.mark.parametrize("role", basecontents.PRESENT_ROLES)
def test_every_role_the_plan_selects_has_the_present_method(role):
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
    assert "present" in specs["argument_specs"]["main"]["options"][f"{role}_method"]["choices"]
    methods = yaml.safe_load((ROOT / "roles" / role / "vars" / "main.yml").read_text())
    assert "present" in methods[f"_{role}_methods"]
    # pytorch's and aws_ofi_nccl's present are checked in their preflight.
    if role not in ("pytorch", "aws_ofi_nccl"):
        assert (ROOT / "roles" / role / "tasks" / "install-present.yml").is_file()


def artifact(name: str, role: str, version: str) -> Artifact:
    return Artifact(name, version, role, f"{name}.tar", ("https://example.invalid/a",), "0" * 64)


NEEDED = [
    artifact("libfabric", "efa", "2.1.0"),
    artifact("openmpi", "openmpi", "5.0.7"),
    artifact("nccl_wheel", "nccl", "2.30.4"),
    artifact("metis", "metis", "5.1.0"),
]
REQUEST = BuildRequest(
    "sagemaker-reduced", "portable", "base:1", "r", None, (), extra_vars=("efa_build_jobs=4",)
)
LOCKED = {"pytorch": "2.5.1"}


def test_the_build_drops_what_the_base_has_and_passes_present(monkeypatch, stubbed_probes):
    monkeypatch.setattr(basecontents, "probe", lambda ref: basecontents.parse_probe(EFA_REDUCED))
    base = plan.probe_base(REQUEST, "sha256:b", SAGEMAKER, {}, LOCKED)
    request, needed, components = plan.use_base_contents(REQUEST, NEEDED, base.contents)
    assert [a.name for a in needed] == ["metis"]
    assert request.extra_vars[0] == "efa_method=present"
    # The user's own variables come last: they win.
    assert request.extra_vars[-1] == "efa_build_jobs=4"
    assert components == {
        "metis": "5.1.0",
        "libfabric": "2.1.0",
        "openmpi": "5.0.7",
        "nccl": "2.30.4",
    }
    from_base = base.contents.report()
    assert set(from_base) == {"efa", "openmpi", "nccl"}
    assert from_base["efa"]["prefix"] == "/opt/amazon/efa"
    assert base.contents.install == ["mpi_ssh", "metis", "rmm", "pytorch", "sagemaker_training"]
    facts = {"libfabric": "2.1.0", "efa_method": "source", "nccl": "2.30.4"}
    assert plan.base_facts(from_base) == facts


def test_a_dlcs_libfabric_is_judged_as_the_efa_installers():
    from_base = basecontents.base_use(basecontents.parse_probe(DLC), ["efa", "nccl"]).report()
    assert plan.base_facts(from_base) == {
        "nccl": "2.23.4",
        "libfabric": "1.22.0amzn4.0",
        "efa_method": "efa_installer",
        "efa_installer": "1.36.0",
    }


def test_no_detect_builds_as_on_a_bare_base(monkeypatch, stubbed_probes):
    def probe(ref):
        raise AssertionError("probed with --no-detect")

    monkeypatch.setattr(basecontents, "probe", probe)
    no_detect = replace(REQUEST, detect=False)
    base = plan.probe_base(no_detect, "sha256:b", SAGEMAKER, {}, LOCKED)
    assert base.contents is None
    request, needed, components = plan.use_base_contents(no_detect, NEEDED, base.contents)
    assert needed == tuple(NEEDED) and request.extra_vars == REQUEST.extra_vars
    assert components == plan.component_versions(NEEDED)


@pytest.fixture
def stubbed_probes(monkeypatch):
    """The base image's CUDA, PATH and apt libfabric, without docker."""
    monkeypatch.setattr(images, "probe_cuda", lambda ref: images.BaseCuda())
    monkeypatch.setattr(images, "base_path", lambda ref: "/usr/bin:/bin")
    monkeypatch.setattr(distro, "probe_for", lambda ref, methods: None)
