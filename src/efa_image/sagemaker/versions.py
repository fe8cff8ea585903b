"""Which smdistributed version a distribution config is for, and the parameter names it takes.

The versions are those of data/smdistributed_builds.yml (efa_image.compat.smdistributed):
a config for a version no build has cannot run in this project's images.
"""

from __future__ import annotations

from efa_image.compat import smdistributed
from efa_image.sagemaker.advice import DistributionError

LIBRARIES = ("mpi", "dataparallel", "modelparallel")
RENAMED = (1, 6, 0)  # smdistributed-modelparallel: partitions -> pipeline_parallel_degree


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def known_versions(library: str, builds: smdistributed.Builds | None = None) -> list[str]:
    """The smdistributed versions of data/smdistributed_builds.yml, oldest first."""
    table = builds if builds is not None else smdistributed.load_builds()
    return sorted({build.version for build in table[library]}, key=version_key)


def resolve_version(
    library: str, version: str | None, builds: smdistributed.Builds | None = None
) -> str | None:
    """The version asked for, or the newest known one; None for plain MPI."""
    if library == "mpi":
        if version:
            raise DistributionError(
                "--version names an smdistributed version: plain MPI has none (drop --version, "
                "or use --library dataparallel/modelparallel)"
            )
        return None
    versions = known_versions(library, builds)
    if version is None:
        return versions[-1]
    if version not in versions:
        raise DistributionError(
            f"smdistributed-{library} {version} is no known build; known: "
            f"{smdistributed.known(library, builds)} (src/efa_image/data/{smdistributed.DATA})"
        )
    return version


def degree_parameter(version: str | None) -> str:
    """The model-parallel parameter that counts the partitions in this version
    (SDK docs smd_model_parallel_general.rst: renamed in 1.6.0)."""
    renamed = version is not None and version_key(version) >= RENAMED
    return "pipeline_parallel_degree" if renamed else "partitions"
