"""The smdistributed version a config is for: the newest known build by default, no other."""

import pytest

from distribution_cases import (
    NEWEST_MP,
    P3,
    errors,
    mp_config,
)
from efa_image.compat import smdistributed
from efa_image.sagemaker import distribution, versions
from efa_image.sagemaker.advice import DistributionError


def test_the_default_version_is_the_newest_build_and_old_ones_take_partitions():
    assert versions.resolve_version("modelparallel", None) == NEWEST_MP
    assert versions.resolve_version("dataparallel", None) == "2.6.0"
    old = distribution.recommend(P3, "modelparallel", "1.5.0")
    assert "partitions" in old["smdistributed"]["modelparallel"]["parameters"]
    assert "pipeline_parallel_degree" not in old["smdistributed"]["modelparallel"]["parameters"]


def test_unknown_smdistributed_version_is_refused_naming_the_known_builds():
    with pytest.raises(
        DistributionError, match=r"modelparallel 1\.99\.0 is no known build; known: "
    ):
        versions.resolve_version("modelparallel", "1.99.0")
    assert set(versions.known_versions("modelparallel")) == {
        b.version for b in smdistributed.load_builds()["modelparallel"]
    }
    found = errors(distribution.check(mp_config({"partitions": 2}), P3, None, "1.99.0"))
    assert len(found) == 1 and "is no known build" in found[0]
    with pytest.raises(DistributionError, match="plain MPI has none"):
        versions.resolve_version("mpi", "1.0.0")


@pytest.mark.parametrize(
    ("version", "parameter"),
    [
        ("1.5.0", "partitions"),
        ("1.6.0", "pipeline_parallel_degree"),
        (NEWEST_MP, "pipeline_parallel_degree"),
        ("1.10.0", "pipeline_parallel_degree"),
        (None, "partitions"),
    ],
)
def test_the_partition_count_is_named_as_the_version_takes_it(version, parameter):
    """1.10.0 > 1.6.0 as numbers, not as strings."""
    assert versions.degree_parameter(version) == parameter
