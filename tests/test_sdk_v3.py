"""SDK v3's ModelTrainer MPI fields: read as the v2 dict, the ranks spread over instances."""

import pytest

from distribution_cases import (
    P4D,
    errors,
)
from efa_image.sagemaker import distribution, sdk_v3
from efa_image.sagemaker.advice import DistributionError


def test_v3_mpi_fields_are_checked_like_v2():
    distributed = {
        "class": "MPI",
        "process_count_per_node": 16,
        "mpi_additional_options": ["--mca", "btl_vader_single_copy_mechanism", "none"],
    }
    found = errors(distribution.check(sdk_v3.from_v3(distributed), P4D, "mpi", sdk="v3"))
    assert len(found) == 2
    assert "more than the 8 GPUs" in found[0] and "ModelTrainer's MPI driver" in found[1]
    with pytest.raises(DistributionError, match="not 'Torchrun'"):
        sdk_v3.from_v3({"class": "Torchrun"})


def test_the_printed_v3_config_passes_its_own_check():
    """process_count_per_node is the total with the spread: the per-host rules see 8 per host."""
    distributed = {
        "class": "MPI",
        "process_count_per_node": 16,
        "mpi_additional_options": ["--map-by", "ppr:8:node", "-x", "FI_PROVIDER=efa"],
    }
    assert sdk_v3.check_v3(distributed) == []
    mpi = sdk_v3.from_v3(distributed)["mpi"]
    assert mpi["processes_per_host"] == 8
    assert errors(distribution.check(sdk_v3.from_v3(distributed), P4D, "mpi", sdk="v3")) == []
    assert sdk_v3.v3_spread(["--map-by=ppr:4:node:pe=2"]) == 4
    assert sdk_v3.v3_spread(["--map-by", "slot"]) is None


@pytest.mark.parametrize("instances", [1, 2, 4])
def test_the_spread_reads_back_as_the_ranks_per_instance(instances):
    """What snippets print for ModelTrainer, from_v3 reads as 8 per host on any instance count."""
    total, options = sdk_v3.spread(8, instances, ["-x", "FI_PROVIDER=efa"])
    assert total == 8 * instances and options[-2:] == ["-x", "FI_PROVIDER=efa"]
    distributed = {
        "class": "MPI",
        "process_count_per_node": total,
        "mpi_additional_options": options,
    }
    assert sdk_v3.from_v3(distributed)["mpi"]["processes_per_host"] == 8
    assert (sdk_v3.v3_spread(options) is None) == (instances == 1)
