"""The SageMaker instance type table: GPUs, EFA and GPUDirect RDMA, each from a named source."""

import re
from pathlib import Path

import pytest
import yaml

from distribution_cases import (
    P4D,
)
from efa_image.sagemaker import instance_types
from efa_image.sagemaker.instance_types import InstanceTypeError

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src/efa_image/data/sagemaker_instance_types.yml"


def test_table_is_well_formed_and_names_its_sources():
    """Read without the loader: every type has GPUs, EFA facts and sources the header defines."""
    text = DATA.read_text()
    header_tags = set(re.findall(r"^#   (\w+) {2,}", text, re.MULTILINE))
    assert {"sdk", "hyperpod", "ec2", "toolkit", "ofi", "deadline"} <= header_tags
    types = yaml.safe_load(text)["instance_types"]
    for name, entry in types.items():
        assert name.startswith("ml."), name
        assert isinstance(entry["gpus"], int) and entry["gpus"] > 0, name
        assert set(entry["sources"]) <= header_tags, name
        assert not (entry["gpudirect_rdma"] and not entry["efa"]), name
    # the brief's types, as the sources give them
    for name in ("ml.p3.2xlarge", "ml.p3.8xlarge", "ml.p3.16xlarge", "ml.p3dn.24xlarge"):
        assert types[name]["gpu"] == "V100"
    assert (types["ml.p3.2xlarge"]["gpus"], types["ml.p3.8xlarge"]["gpus"]) == (1, 4)
    assert types["ml.p3dn.24xlarge"]["efa"] and not types["ml.p3dn.24xlarge"]["gpudirect_rdma"]
    for name in ("ml.p4d.24xlarge", "ml.p4de.24xlarge", "ml.p5.48xlarge", "ml.p5en.48xlarge"):
        assert types[name]["gpus"] == 8 and types[name]["efa"] and types[name]["gpudirect_rdma"]
    # The newest EFA families: B200 hosts with 8 GPUs, GB200 (Grace) hosts with 4.
    assert (
        types["ml.p6-b200.48xlarge"]["gpus"] == 8 and types["ml.p6-b200.48xlarge"]["gpudirect_rdma"]
    )
    assert types["ml.p6e-gb200.36xlarge"]["gpus"] == 4
    assert (
        types["ml.p6e-gb200.36xlarge"]["efa"] and types["ml.p6e-gb200.36xlarge"]["gpudirect_rdma"]
    )


def test_loader_matches_the_file_and_refuses_a_bad_entry(tmp_path):
    table = instance_types.load_instance_types()
    assert len(table) == len(yaml.safe_load(DATA.read_text())["instance_types"])
    bad = tmp_path / "types.yml"
    bad.write_text(
        "instance_types:\n  ml.x.large: {gpus: 1, gpu: V100, efa: false, gpudirect_rdma: true, "
        "sources: [sdk]}\n"
    )
    with pytest.raises(InstanceTypeError, match="GPUDirect RDMA only with EFA"):
        instance_types.load_instance_types(bad)


def test_instance_type_accepts_the_ec2_name_and_refuses_an_unknown_one():
    assert instance_types.instance_type("p4d.24xlarge") == P4D
    with pytest.raises(InstanceTypeError, match=r"unknown .*'ml.p9.huge'.*ml.p4d.24xlarge"):
        instance_types.instance_type("ml.p9.huge")
