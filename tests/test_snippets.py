"""The SDK code `efa-image distribution` prints to paste."""

import pytest

from distribution_cases import (
    P4D,
)
from efa_image.sagemaker import distribution, snippets
from efa_image.sagemaker.advice import DistributionError


def test_v3_snippet_uses_the_sdks_classes_and_refuses_smdistributed():
    snippet = snippets.render_v3(distribution.recommend(P4D, "mpi"), P4D, "mpi")
    assert "from sagemaker.train.distributed import MPI" in snippet
    assert "from sagemaker.train import ModelTrainer" in snippet
    # SDK v3's -np is process_count_per_node: the total, spread 8 per instance.
    assert "process_count_per_node=16,  # 2 instances x 8" in snippet
    assert (
        'mpi_additional_options=["--map-by", "ppr:8:node", "-x", "FI_EFA_USE_DEVICE_RDMA=1", '
        '"-x", "FI_PROVIDER=efa", "-x", "RDMAV_FORK_SAFE=1"],' in snippet
    )
    assert "every one on algo-1" in snippet
    single = snippets.render_v3(distribution.recommend(P4D, "mpi"), P4D, "mpi", 1)
    assert "process_count_per_node=8,\n" in single and "ppr:" not in single
    for library in ("modelparallel", "dataparallel"):
        with pytest.raises(DistributionError, match="use --sdk v2"):
            snippets.render_v3(distribution.recommend(P4D, library), P4D, library)
