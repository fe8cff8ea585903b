"""Each section of a distribution config alone: model parallel, mpi, mpirun's options."""

import pytest

from distribution_cases import (
    P3,
    P4D,
    errors,
    mp_config,
    warnings,
)
from efa_image.sagemaker import distribution, instance_types, sections
from efa_image.sagemaker.advice import Advice, DistributionError


def test_pipeline_parallel_degree_is_refused_before_1_6_0():
    found = errors(
        distribution.check(mp_config({"pipeline_parallel_degree": 2}), P3, None, "1.5.0")
    )
    assert found == [
        "smdistributed.modelparallel.parameters: rename 'pipeline_parallel_degree' to "
        "'partitions': smdistributed-modelparallel 1.5.0 takes 'partitions' "
        "(pipeline_parallel_degree replaced partitions only from 1.6.0)"
    ]


def test_partitions_is_refused_from_1_6_0_and_by_default():
    for version in ("1.7.0", None):
        found = errors(distribution.check(mp_config({"partitions": 2}), P3, None, version))
        assert len(found) == 1 and "rename 'partitions' to 'pipeline_parallel_degree'" in found[0]
    assert distribution.check(mp_config({"partitions": 2}), P3, None, "1.5.0") == []


def test_missing_or_bad_degree_is_refused():
    assert errors(distribution.check(mp_config({"ddp": True}), P3)) == [
        "smdistributed.modelparallel.parameters: add 'pipeline_parallel_degree', the number of "
        "model partitions"
    ]
    found = errors(distribution.check(mp_config({"pipeline_parallel_degree": 0}), P3))
    assert found == [
        "smdistributed.modelparallel.parameters.pipeline_parallel_degree: 0 must be a positive "
        "integer"
    ]
    both = {"pipeline_parallel_degree": 2, "ddp": True, "horovod": True}
    assert "exclude each other" in errors(distribution.check(mp_config(both), P3))[0]


def test_processes_per_host_above_the_gpus_is_refused():
    config = {"mpi": {"enabled": True, "processes_per_host": 9}}
    assert errors(distribution.check(config, P3, "mpi")) == [
        "mpi.processes_per_host: 9 is more than the 8 GPUs of ml.p3.16xlarge: set it to 8 "
        "(one process per GPU)"
    ]
    one_gpu = instance_types.instance_type("ml.p3.2xlarge")
    config["mpi"]["processes_per_host"] = 2
    assert "more than the 1 GPUs" in errors(distribution.check(config, one_gpu))[0]
    with pytest.raises(DistributionError, match="more than the 8 GPUs"):
        distribution.recommend(P4D, "mpi", processes_per_host=16)
    config["mpi"]["processes_per_host"] = "8"
    assert "must be a positive integer" in errors(distribution.check(config, P3))[0]


def test_missing_processes_per_host_is_a_warning():
    findings = distribution.check({"mpi": {"enabled": True}}, P3, "mpi")
    assert errors(findings) == []
    assert warnings(findings) == [
        'mpi: no processes_per_host: the toolkit then starts one per GPU; say "processes_per_host":'
        " 8 (the guide makes it required)"
    ]


@pytest.mark.parametrize("option", ["--mca", "-mca"])
def test_vader_single_copy_mechanism_is_refused(option):
    config = {
        "mpi": {
            "enabled": True,
            "processes_per_host": 8,
            "custom_mpi_options": f"{option} btl_vader_single_copy_mechanism none",
        }
    }
    assert errors(distribution.check(config, P3, "mpi")) == [
        f"mpi.custom_mpi_options: remove '{option} btl_vader_single_copy_mechanism none': the "
        "sagemaker-training toolkit already passes -mca btl_vader_single_copy_mechanism, and "
        "mpirun fails on an MCA parameter listed twice"
    ]


def test_other_mca_parameters_of_the_launcher_are_refused_and_new_ones_pass():
    config = {"mpi": {"enabled": True, "processes_per_host": 8, "custom_mpi_options": ""}}
    config["mpi"]["custom_mpi_options"] = "-mca pml ob1 --mca btl_tcp_if_include eth0"
    assert len(errors(distribution.check(config, P3, "mpi"))) == 2
    config["mpi"]["custom_mpi_options"] = "--mca coll_hcoll_enable 0 -x NCCL_DEBUG=INFO"
    assert distribution.check(config, P3, "mpi") == []
    # ModelTrainer's driver also passes plm_rsh_num_concurrent; the toolkit does not
    options = "-mca plm_rsh_num_concurrent 2"
    assert sections.check_mpi_options(options, P3, "x", "v2") == []
    assert errors(sections.check_mpi_options(options, P3, "x", "v3"))


def test_model_parallel_needs_its_parameters_and_enabled():
    assert sections.check_modelparallel({"enabled": True}, "1.5.0") == [
        Advice("error", "smdistributed.modelparallel.parameters: required, a dict with partitions")
    ]
    assert errors(sections.check_modelparallel({"parameters": {"partitions": 2}}, "1.5.0")) == [
        'smdistributed.modelparallel: set "enabled": True (required by the SDK)'
    ]
