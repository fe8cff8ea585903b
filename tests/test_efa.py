"""The guide's EFA flags: only where the type has EFA, device RDMA only with GPUDirect RDMA."""

import pytest

from distribution_cases import (
    EFA_OPTIONS,
    G6E,
    P3,
    P3DN,
    P4D,
    errors,
    warnings,
)
from efa_image.sagemaker import distribution
from efa_image.sagemaker.advice import DistributionError


def test_p3dn_gets_efa_without_device_rdma():
    config = distribution.recommend(P3DN, "mpi")
    assert config["mpi"]["custom_mpi_options"] == "-x FI_PROVIDER=efa -x RDMAV_FORK_SAFE=1"


def test_efa_and_no_efa_override_the_table():
    assert "custom_mpi_options" not in distribution.recommend(P4D, "mpi", efa=False)["mpi"]
    with pytest.raises(DistributionError, match=r"has no EFA.*drop --efa"):
        distribution.recommend(P3, "mpi", efa=True)
    # a type no source gives EFA for: no flags by default, the guide's (without RDMA) on request
    assert "custom_mpi_options" not in distribution.recommend(G6E, "mpi")["mpi"]
    forced = distribution.recommend(G6E, "mpi", efa=True)["mpi"]["custom_mpi_options"]
    assert forced == "-x FI_PROVIDER=efa -x RDMAV_FORK_SAFE=1"


def test_efa_provider_is_refused_without_efa():
    config = {"mpi": {"enabled": True, "processes_per_host": 8, "custom_mpi_options": EFA_OPTIONS}}
    found = distribution.check(config, P3, "mpi")
    assert errors(found) == [
        "mpi.custom_mpi_options: remove -x FI_EFA_USE_DEVICE_RDMA=1: ml.p3.16xlarge has no EFA",
        "mpi.custom_mpi_options: remove -x FI_PROVIDER=efa: ml.p3.16xlarge has no EFA, and the "
        "EFA provider hangs the job there",
    ]
    assert warnings(found) == [
        "mpi.custom_mpi_options: -x RDMAV_FORK_SAFE=1 does nothing without EFA: drop it"
    ]


def test_device_rdma_is_refused_where_efa_does_not_reach_the_gpu():
    config = {"mpi": {"enabled": True, "processes_per_host": 8, "custom_mpi_options": EFA_OPTIONS}}
    assert errors(distribution.check(config, P3DN, "mpi")) == [
        "mpi.custom_mpi_options: remove -x FI_EFA_USE_DEVICE_RDMA=1: EFA on ml.p3dn.24xlarge "
        "(V100) has no GPUDirect RDMA (aws-ofi-nccl gdr_required only on p4d, p4de, p5, p5e, p5en)"
    ]


def test_efa_flags_on_a_type_without_a_source_are_warnings():
    config = {"mpi": {"enabled": True, "processes_per_host": 8, "custom_mpi_options": EFA_OPTIONS}}
    found = distribution.check(config, G6E, "mpi")
    assert errors(found) == [] and len(warnings(found)) == 2


def test_missing_efa_flags_on_an_efa_type_are_a_warning():
    config = {"mpi": {"enabled": True, "processes_per_host": 8}}
    assert warnings(distribution.check(config, P4D, "mpi")) == [
        f'mpi: ml.p4d.24xlarge has EFA: add "custom_mpi_options": "{EFA_OPTIONS}" for the '
        "guide's best performance"
    ]
    config["mpi"]["custom_mpi_options"] = "-x FI_PROVIDER=efa"
    assert (
        "add -x FI_EFA_USE_DEVICE_RDMA=1 -x RDMAV_FORK_SAFE=1"
        in warnings(distribution.check(config, P4D, "mpi"))[0]
    )
