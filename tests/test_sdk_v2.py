"""hyperparameters.json as SageMaker Python SDK v2.257 writes it for each kind of distribution."""

import json

import pytest

from distribution_cases import (
    EFA_OPTIONS,
    P3,
    P4D,
    P5,
)
from efa_image.sagemaker import (
    distribution,
    sdk_v2,
)
from efa_image.sagemaker.advice import DistributionError


def test_mpi_hyperparameters_are_json_encoded_as_the_sdk_writes_them():
    config = distribution.recommend(P4D, "mpi")
    assert sdk_v2.hyperparameters(config, "train.py", "/opt/ml/code") == {
        "sagemaker_submit_directory": '"/opt/ml/code"',
        "sagemaker_program": '"train.py"',
        "sagemaker_container_log_level": "20",
        "sagemaker_mpi_enabled": "true",
        "sagemaker_mpi_num_of_processes_per_host": "8",
        "sagemaker_mpi_custom_mpi_options": json.dumps(EFA_OPTIONS),
    }


def test_modelparallel_hyperparameters_carry_mp_parameters():
    config = distribution.recommend(P3, "modelparallel")
    values = sdk_v2.hyperparameters(
        config,
        "train.py",
        "s3://bucket/job/source/sourcedir.tar.gz",
        instance_type="ml.p3.16xlarge",
        user_hyperparameters={"epochs": 2},
        job_name="job",
        region="us-west-2",
    )
    assert list(values) == [
        "epochs",
        "sagemaker_submit_directory",
        "sagemaker_program",
        "sagemaker_container_log_level",
        "sagemaker_job_name",
        "sagemaker_region",
        "sagemaker_mpi_enabled",
        "sagemaker_mpi_num_of_processes_per_host",
        "sagemaker_mpi_custom_mpi_options",
        "mp_parameters",
        "sagemaker_distributed_dataparallel_enabled",
        "sagemaker_instance_type",
    ]
    assert values["epochs"] == "2"
    assert values["sagemaker_mpi_custom_mpi_options"] == '""'  # the SDK's default
    assert json.loads(values["mp_parameters"]) == {
        "pipeline_parallel_degree": 2,
        "microbatches": 4,
        "ddp": True,
    }
    assert values["sagemaker_distributed_dataparallel_enabled"] == "false"
    assert values["sagemaker_instance_type"] == '"ml.p3.16xlarge"'
    # every value decodes, as the toolkit's read_hyperparameters does
    assert all(json.loads(v) is not None for v in values.values())


def recommended(itype, library, instance_type):
    """The hyperparameters of the config efa-image prints for this type and library."""
    config = distribution.recommend(itype, library)
    return sdk_v2.hyperparameters(config, "t.py", "/opt/ml/code", instance_type=instance_type)


def test_dataparallel_and_p5_hyperparameters():
    values = recommended(P4D, "dataparallel", "ml.p4d.24xlarge")
    assert values["sagemaker_distributed_dataparallel_enabled"] == "true"
    assert values["sagemaker_distributed_dataparallel_custom_mpi_options"] == json.dumps(
        EFA_OPTIONS
    )
    assert "sagemaker_mpi_enabled" not in values
    p5 = recommended(P5, "modelparallel", "p5.48xlarge")  # the EC2 name gets its ml.
    assert p5["sagemaker_torch_distributed_enabled"] == "true"
    assert p5["sagemaker_instance_type"] == '"ml.p5.48xlarge"'
    assert "mp_parameters" in p5


def test_hyperparameters_refuse_an_absolute_entry_point():
    with pytest.raises(DistributionError, match="relative to the submit directory"):
        sdk_v2.hyperparameters({"mpi": {"enabled": True}}, "/opt/ml/code/train.py", "/opt/ml/code")


def test_hyperparameters_json_is_written_where_asked(tmp_path):
    values = sdk_v2.hyperparameters({"mpi": {"enabled": True}}, "train.py", "/opt/ml/code")
    target = tmp_path / "input" / "config" / "hyperparameters.json"
    sdk_v2.write_hyperparameters(target, values)
    assert json.loads(target.read_text()) == values
    assert target.read_text().endswith("}\n")
