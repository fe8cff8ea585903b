"""`make bench`: the project's builds timed against AWS's documented recipe, on one machine.

`scripts/bench FLAVOR PROFILE` runs, in one go and in this order:

- the flavour and profile cold (empty artifact and build caches), unchanged
  (the same caches), and one-bump (the same caches, with
  bench/lock-overlays/nccl-wheel-bump.yml moving the NCCL wheel only);
- bench/aws-doc-recipe/Dockerfile, AWS's "Run training with EFA" steps with the
  portable profile's sources and the same base image: cold (`docker build
  --no-cache`), unchanged (the layer cache) and one-bump (the same bump);
- the `distro` profile cold (empty caches), or a stated reason why not;
- a fresh machine with a warm registry: the bench starts the CNCF distribution
  registry on loopback (tools/localregistry.py) for all its runs, and the cold
  run also publishes into it (`--build-cache DIR,oci://REG/efa-image-bench-cache
  --push REG/efa-image-bench`: every compiled component, and the verified image
  with its fingerprint record). Then, from a second checkout (a copy of this
  working tree's files, so uncommitted changes keep their fingerprint), with an
  empty artifact and build cache and without the images the project's runs
  built, fresh-unchanged (which should pull the pushed image) and fresh-one-bump
  (which should take libfabric and Open MPI from the registry and compile the
  rest). The base image stays, as on any machine that builds on it: its ID is
  part of the fingerprint. The recipe's images stay too; no fresh run uses them.
  Each project run records the bytes it took from the registry (the registry's
  access log: the responses to its GETs).

It writes build/bench/FLAVOR-PROFILE.json (every run, the ratios and the
targets of issue 12) and prints a short table. A failing run stops the bench
with its message and the report of the runs so far.

Times are wall-clock seconds of the command a user would run (`efa-image
build`, which includes its pre-flight and verification, or `docker build`);
preparing the recipe's build context is timed apart and not counted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from efa_image.artifacts.artifact_store import ArtifactError, Store, digest_of
from efa_image.artifacts.lock import Artifact, Lock
from efa_image.errors import EfaImageError
from efa_image.paths import project_root
from localregistry import LOG, REGISTRY, RegistryError, bytes_sent, local_registry, log_offset

DOC_DOCKERFILE = Path("bench/aws-doc-recipe/Dockerfile")
BUMP_OVERLAY = Path("bench/lock-overlays/nccl-wheel-bump.yml")
# The recipe takes the portable profile's sources whatever profile is benched:
# the comparison of issue 12 is against those.
DOC_PROFILE = "portable"
DISTRO_PROFILE = "distro"
# Bench images stay apart from `make image`'s: the one-bump would otherwise
# leave efa-image:FLAVOR-PROFILE holding an NCCL the lock does not name.
REPOSITORY = "efa-image-bench"
# In the bench's registry: the cold run's compiled components (build cache entries).
CACHE_REPOSITORY = f"{REPOSITORY}-cache"
# Lock component -> the recipe's (version ARG, file ARG).
DOC_ARGS: dict[str, tuple[str, str]] = {
    "libfabric": ("LIBFABRIC_VERSION", "LIBFABRIC_ARCHIVE"),
    "openmpi": ("OPENMPI_VERSION", "OPENMPI_ARCHIVE"),
    "nccl_wheel": ("NCCL_VERSION", "NCCL_WHEEL"),
}
# Run names, in the order they run.
PROJECT_RUNS = ("cold", "unchanged", "one-bump")
DOC_RUNS = ("doc-cold", "doc-unchanged", "doc-one-bump")
DISTRO_RUN = "distro-cold"
FRESH_RUNS = ("fresh-unchanged", "fresh-one-bump")
SKIPPABLE = ("one-bump", "doc", "doc-one-bump", "distro", "fresh")
# The recipe's image must hold what it claims before its times mean anything:
# libfabric with the efa provider, the Open MPI and the NCCL of the lock.
DOC_CHECK = r"""
set -e
/opt/amazon/efa/bin/fi_info -l | grep -q '^efa:' || { echo "fi_info -l lists no efa"; exit 1; }
mpirun --version | grep -q "$1" || { echo "mpirun is not Open MPI $1"; mpirun --version; exit 1; }
python3 - "$2" <<'PY'
import ctypes, sys
code = ctypes.c_int()
ctypes.CDLL("/usr/local/lib/libnccl.so.2").ncclGetVersion(ctypes.byref(code))
if code.value != int(sys.argv[1]):
    sys.exit(f"libnccl.so.2 is version code {code.value}, not {sys.argv[1]}")
PY
"""


class BenchError(EfaImageError):
    """A run failed or could not start; the message names the run and the remedy."""


# Runs, ratios, targets: pure, unit-tested ---------------------------------------


@dataclass
class Run:
    """One timed build: the project's (`efa-image build`) or the recipe's (`docker build`)."""

    name: str
    label: str
    seconds: float
    image: str = ""
    image_bytes: int = 0
    base_bytes: int = 0
    # Whether `efa-image build` reused an unchanged image (None: it does not say), and
    # where from: "" (built), "local", or the registry reference it pulled.
    reused: bool | None = None
    reused_from: str | None = None
    build_cache: dict[str, str] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def added_bytes(self) -> int:
        """The image's size minus its base image's (0 when either is unknown)."""
        if not self.image_bytes or not self.base_bytes:
            return 0
        return self.image_bytes - self.base_bytes

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "added_bytes": self.added_bytes}


@dataclass(frozen=True)
class Target:
    key: str
    description: str
    limit: float
    unit: str  # "x" (a ratio) or "s" (seconds)


TARGETS = (
    Target("cold_vs_doc", "cold {project} / doc recipe cold", 0.8, "x"),
    Target("unchanged_seconds", "unchanged rebuild of {project}", 5.0, "s"),
    Target("one_bump_vs_cold", "one-bump {project} / its cold build", 0.2, "x"),
    Target("distro_cold_vs_doc", "cold {distro} / doc recipe cold", 0.25, "x"),
    Target("image_vs_doc", "image {project} / doc recipe image", 1.0, "x"),
    Target("distro_image_vs_doc", "image {distro} / doc recipe image", 1.0, "x"),
)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, None when either is unknown or the denominator is 0."""
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 3)


def compute_ratios(runs: Mapping[str, Run]) -> dict[str, float | None]:
    """The ratios of issue 12 from whichever runs there are (None for the others)."""

    def seconds(name: str) -> float | None:
        return runs[name].seconds if name in runs else None

    def size(name: str, added: bool = False) -> float | None:
        if name not in runs:
            return None
        value = runs[name].added_bytes if added else runs[name].image_bytes
        return value or None

    return {
        "cold_vs_doc": ratio(seconds("cold"), seconds("doc-cold")),
        "unchanged_seconds": seconds("unchanged"),
        "one_bump_vs_cold": ratio(seconds("one-bump"), seconds("cold")),
        "distro_cold_vs_doc": ratio(seconds(DISTRO_RUN), seconds("doc-cold")),
        "image_vs_doc": ratio(size("cold"), size("doc-cold")),
        "added_vs_doc": ratio(size("cold", added=True), size("doc-cold", added=True)),
        "distro_image_vs_doc": ratio(size(DISTRO_RUN), size("doc-cold")),
        "distro_added_vs_doc": ratio(size(DISTRO_RUN, added=True), size("doc-cold", added=True)),
        "doc_unchanged_seconds": seconds("doc-unchanged"),
        "doc_one_bump_vs_doc_cold": ratio(seconds("doc-one-bump"), seconds("doc-cold")),
        # A fresh machine has no layer cache, so the recipe's counterpart there is its cold
        # build, not doc-unchanged. Its one-bump reused only the layers before the versions
        # (the base and Debian's packages), which a fresh machine would build as well: a
        # comparison that favours the recipe.
        "fresh_unchanged_vs_doc_cold": ratio(seconds("fresh-unchanged"), seconds("doc-cold")),
        "fresh_one_bump_vs_doc_cold": ratio(seconds("fresh-one-bump"), seconds("doc-cold")),
        "fresh_one_bump_vs_doc_one_bump": ratio(seconds("fresh-one-bump"), seconds("doc-one-bump")),
        "fresh_one_bump_vs_cold": ratio(seconds("fresh-one-bump"), seconds("cold")),
    }


def evaluate(ratios: Mapping[str, float | None], names: Mapping[str, str]) -> list[dict[str, Any]]:
    """Each target with its measured value and pass, FAIL or 'not measured'."""
    results = []
    for target in TARGETS:
        value = ratios.get(target.key)
        passed = None if value is None else value <= target.limit
        result = {None: "not measured", True: "pass", False: "FAIL"}[passed]
        results.append(
            {
                "key": target.key,
                "target": target.description.format(**names),
                "value": value,
                "limit": target.limit,
                "unit": target.unit,
                "result": result,
            }
        )
    return results


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f} s" if value < 100 else f"{value:.0f} s"


def _megabytes(value: int | None) -> str:
    return f"{value / 1e6:.0f} MB" if value else "-"


def _times(value: float | None, unit: str = "x") -> str:
    if value is None:
        return "-"
    return _seconds(value) if unit == "s" else f"{value:.2f}x"


def render_table(report: Mapping[str, Any]) -> str:
    """The issue's table from a report: one row per build, then the targets."""
    runs: Mapping[str, Mapping[str, Any]] = report.get("runs", {})
    ratios: Mapping[str, float | None] = report.get("ratios", {})
    skipped: Mapping[str, str] = report.get("skipped", {})

    def cell(name: str | None, key: str) -> Any:
        return runs.get(name, {}).get(key) if name else None

    def versus(text: str, *comparisons: tuple[str | None, str]) -> str:
        parts = [
            f"{_times(ratios[key])} {what}"
            for key, what in comparisons
            if key and ratios.get(key) is not None
        ]
        return f"{text} ({', '.join(parts)})" if parts else text

    def pulled(text: str, name: str) -> str:
        moved = (cell(name, "details") or {}).get("registry_bytes")
        return text if moved is None else f"{text}, {moved / 1e6:.0f} MB from the registry"

    def build_row(label: str, names: Sequence[str | None], keys: Sequence[str | None]) -> str:
        """cold, unchanged, one-bump; the cold run's and image's ratios against the recipe."""
        cold, unchanged, bump = names
        cold_key, image_key = keys
        if cold not in runs:
            return f"| {label} | skipped: {skipped.get(cold or '', 'not run')} | | | | |"
        bump_key = "one_bump_vs_cold" if bump == "one-bump" else None
        cells = [
            versus(_seconds(cell(cold, "seconds")), (cold_key, "doc")),
            _seconds(cell(unchanged, "seconds")) if unchanged else "-",
            versus(_seconds(cell(bump, "seconds")), (bump_key, "cold")) if bump else "-",
            versus(_megabytes(cell(cold, "image_bytes")), (image_key, "doc")),
            _megabytes(cell(cold, "added_bytes")),
        ]
        return f"| {label} | " + " | ".join(cells) + " |"

    def fresh_row(label: str) -> str:
        """The second checkout's runs: no cold of their own, and the images are the others'."""
        unchanged, bump = FRESH_RUNS
        if unchanged not in runs and bump not in runs:
            return f"| {label} | skipped: {skipped.get(unchanged, 'not run')} | | | | |"
        unchanged_cell = versus(
            _seconds(cell(unchanged, "seconds")), ("fresh_unchanged_vs_doc_cold", "doc cold")
        )
        bump_cell = versus(
            _seconds(cell(bump, "seconds")),
            ("fresh_one_bump_vs_doc_cold", "doc cold"),
            ("fresh_one_bump_vs_doc_one_bump", "doc one-bump"),
            ("fresh_one_bump_vs_cold", "cold"),
        )
        cells = ["-", pulled(unchanged_cell, unchanged), pulled(bump_cell, bump), "-", "-"]
        return f"| {label} | " + " | ".join(cells) + " |"

    names = report.get("names", {})
    project = names.get("project", "project")
    lines = [
        "| build | cold | unchanged | one-bump | image | added on base |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        build_row("AWS doc recipe (Dockerfile)", DOC_RUNS, (None, None)),
        build_row(project, PROJECT_RUNS, ("cold_vs_doc", "image_vs_doc")),
        fresh_row(f"{project}, fresh machine, warm registry"),
        build_row(
            names.get("distro", DISTRO_PROFILE),
            (DISTRO_RUN, None, None),
            ("distro_cold_vs_doc", "distro_image_vs_doc"),
        ),
    ]
    lines += ["", "| target | measured | limit | result |", "| --- | ---: | ---: | --- |"]
    for target in report.get("targets", []):
        unit = target["unit"]
        lines.append(
            f"| {target['target']} | {_times(target['value'], unit)} "
            f"| <= {_times(target['limit'], unit)} | {target['result']} |"
        )
    for note in report.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines)


def make_report(
    info: Mapping[str, Any],
    runs: Mapping[str, Run],
    skipped: Mapping[str, str],
    notes: Sequence[str] = (),
    failed: str | None = None,
) -> dict[str, Any]:
    """The JSON report: what ran, every run, the ratios and the targets."""
    ratios = compute_ratios(runs)
    targets = evaluate(ratios, info.get("names", {"project": "project", "distro": "distro"}))
    measured = [t for t in targets if t["result"] != "not measured"]
    return {
        **info,
        "runs": {name: run.to_dict() for name, run in runs.items()},
        "skipped": dict(skipped),
        "ratios": ratios,
        "targets": targets,
        "targets_met": failed is None and all(t["result"] == "pass" for t in measured),
        "notes": list(notes),
        "failed": failed,
    }


def doc_build_args(lock: Lock, base_image: str) -> dict[str, str]:
    """The recipe's --build-arg values for the components as `lock` pins them."""
    args = {"BASE_IMAGE": base_image}
    for name, (version_arg, file_arg) in DOC_ARGS.items():
        artifact = lock.get(name)
        args[version_arg] = artifact.version
        args[file_arg] = artifact.filename
    return args


def nccl_version_code(version: str) -> int:
    """NCCL_VERSION_CODE of a release (2.30.4 -> 23004; ncclGetVersion returns it)."""
    major, minor, patch = (int(part) for part in version.split("-")[0].split(".")[:3])
    return major * 10000 + minor * 100 + patch


def moved_components(before: Lock, after: Lock) -> dict[str, tuple[str, str]]:
    """Components whose pin differs between two locks: name -> (old, new version)."""
    return {
        name: (artifact.version, after.get(name).version)
        for name, artifact in before.artifacts.items()
        if after.get(name).digest != artifact.digest
    }


def read_build_report(path: Path) -> dict[str, Any]:
    """`efa-image build --report`'s JSON; a missing or broken file is a failed run."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BenchError(f"{path}: no readable build report ({exc})") from exc
    if not isinstance(data, dict):
        raise BenchError(f"{path}: the build report is not a JSON object")
    return data


def project_run(
    name: str, label: str, seconds: float, report: Mapping[str, Any], base_bytes: int
) -> Run:
    """A Run from a build report, read defensively: fields may come and go."""
    build_cache = report.get("build_cache")
    reused = report.get("reused")
    reused_from = report.get("reused_from")
    return Run(
        name=name,
        label=label,
        seconds=round(seconds, 1),
        image=str(report.get("image") or ""),
        image_bytes=int(report.get("image_bytes") or 0),
        base_bytes=base_bytes,
        reused=reused if isinstance(reused, bool) else None,
        reused_from=reused_from if isinstance(reused_from, str) else None,
        build_cache=dict(build_cache) if isinstance(build_cache, Mapping) else {},
        details={"build_report": dict(report)},
    )


def cache_notes(runs: Mapping[str, Run], bumped: Sequence[str]) -> list[str]:
    """What makes a rebuild's time mean something else than it seems."""
    notes = []
    for name in ("unchanged", "one-bump"):
        run = runs.get(name)
        if not run:
            continue
        misses = [
            component
            for component, state in run.build_cache.items()
            if state == "miss" and component not in bumped
        ]
        if misses:
            notes.append(
                f"{name}: the build cache missed for {', '.join(misses)} (compiled again), "
                "so this rebuild's time includes those compiles"
            )
    return notes


# The build report's build_cache values, as a note names them.
BUILD_CACHE_STATES = {
    "registry": "from the registry",
    "hit": "from the local cache",
    "miss": "compiled",
    "off": "build cache off",
}


def fresh_notes(runs: Mapping[str, Run]) -> list[str]:
    """Where the fresh machine's runs took their image and components from."""
    notes = []
    cold = runs.get("cold")
    if cold and cold.details.get("registry_options"):
        notes.append(
            "cold: also pushed its compiled components and its image to the bench's registry "
            "on loopback, and its time includes that"
        )
    unchanged = runs.get("fresh-unchanged")
    if unchanged and unchanged.reused_from is None:
        notes.append("fresh-unchanged: the build report does not say where its image came from")
    elif unchanged and unchanged.reused_from == "local":
        notes.append(
            "fresh-unchanged: reused a local image, though its cache was empty and the bench "
            "had removed the project's images"
        )
    elif unchanged and unchanged.reused_from == "":
        fingerprints = {
            run.details.get("build_report", {}).get("fingerprint")
            for run in (cold, unchanged)
            if run
        }
        why = (
            "its fingerprint differs from the cold run's"
            if len(fingerprints) > 1
            else "the pushed image was not taken"
        )
        notes.append(
            f"fresh-unchanged: built the image instead of pulling the pushed one ({why}), "
            "so its time is a build's"
        )
    bump = runs.get("fresh-one-bump")
    if bump and bump.build_cache:
        parts = []
        for state, what in BUILD_CACHE_STATES.items():
            names = [name for name, got in bump.build_cache.items() if got == state]
            if names:
                parts.append(f"{what}: {', '.join(names)}")
        notes.append("fresh-one-bump: " + "; ".join(parts or ["no compiled components"]))
    if bump:
        stages = bump.details.get("build_report", {}).get("stages", {})
        fetch = stages.get("fetch") if isinstance(stages, Mapping) else None
        if fetch:
            notes.append(
                f"fresh-one-bump: {_seconds(fetch)} of its time fetched the artifacts into its "
                "empty cache, as on a fresh machine (the recipe's context is prepared untimed)"
            )
    return notes


def run_notes(machine: Mapping[str, Any], runs: Mapping[str, Run]) -> list[str]:
    """What a reader of the times must know about how they were taken."""
    notes = []
    if "doc-one-bump" in runs:
        notes.append(
            "doc recipe one-bump: the recipe declares its versions at the top, as the guide "
            "does, so moving one rebuilds every step after them"
        )
    cpus = machine.get("cpus") or 0
    loads = [*machine.get("load_average", [])[:1], *machine.get("load_average_end", [])[:1]]
    if cpus and any(load > cpus for load in loads):
        notes.append(
            f"load average {max(loads):.1f} on {cpus} CPUs at the start or end: other work "
            "ran beside the bench, so its times are longer than on an idle machine"
        )
    return notes


def registry_installed() -> bool:
    return shutil.which(REGISTRY) is not None


def publish_options(registry: str, local_cache: Path) -> list[str]:
    """The cold run's: its compiled components and its verified image into the registry."""
    return [
        "--build-cache", f"{local_cache},oci://{registry}/{CACHE_REPOSITORY}",
        "--push", f"{registry}/{REPOSITORY}",
    ]  # fmt: skip


def fresh_options(registry: str) -> list[str]:
    """The fresh runs': components and the verified image from the registry where it has them."""
    return [
        "--build-cache", f"oci://{registry}/{CACHE_REPOSITORY}",
        "--reuse-from", f"{registry}/{REPOSITORY}",
    ]  # fmt: skip


def project_images(runs: Mapping[str, Run], keep: Sequence[str | None] = ()) -> list[str]:
    """The image IDs the project's runs reported (the recipe's runs report tags), once each."""
    images = [
        run.image
        for name, run in runs.items()
        if name not in DOC_RUNS and run.image.startswith("sha256:") and run.image not in keep
    ]
    return list(dict.fromkeys(images))


def checkout_files(root: Path) -> list[str]:
    """The working tree's tracked files and the untracked ones git does not ignore."""
    listing = ["ls-files", "-z", "--cached", "--others", "--exclude-standard", "--deduplicate"]
    proc = subprocess.run(["git", "-C", str(root), *listing], capture_output=True, check=False)
    if proc.returncode != 0:
        raise BenchError(f"{root}: `git ls-files` failed: {proc.stderr.decode().strip()}")
    return [os.fsdecode(name) for name in proc.stdout.split(b"\0") if name]


def make_checkout(root: Path, dest: Path) -> Path:
    """A second checkout of the working tree as it is now, in dest.

    A copy rather than a clone of HEAD: uncommitted changes are inputs of the
    fingerprint, and the fresh runs must have the cold run's."""
    for name in checkout_files(root):
        source = root / name
        # A tracked file deleted in the working tree is not part of it.
        if not source.is_file() and not source.is_symlink():
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    return dest


def checkout_env(checkout: Path) -> dict[str, str]:
    """`efa-image build` with the second checkout's code, roles and playbooks.

    EFA_IMAGE_ROOT wins over where efa_image was imported from (efa_image.paths), and
    PYTHONPATH comes before the virtualenv's editable install of the first checkout."""
    return {"PYTHONPATH": str(checkout / "src"), "EFA_IMAGE_ROOT": str(checkout)}


CHECKOUT_PROBE = (
    "import efa_image, efa_image.paths; print(efa_image.__file__); "
    "print(efa_image.paths.project_root())"
)


def check_checkout(checkout: Path) -> None:
    """Fail unless a build in the checkout runs its code and finds its project root there."""
    proc = subprocess.run(
        [sys.executable, "-c", CHECKOUT_PROBE],
        env={**os.environ, **checkout_env(checkout)},
        cwd=checkout,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(lines) != 2:
        raise BenchError(f"{checkout}: efa_image does not import there: {proc.stderr.strip()}")
    module, root = (Path(line).resolve() for line in lines)
    if not module.is_relative_to(checkout.resolve()) or root != checkout.resolve():
        raise BenchError(
            f"the second checkout {checkout} would build with efa_image from {module.parent} "
            f"and the project root {root}; a fresh run must use the checkout's"
        )


# Running the builds ---------------------------------------------------------------


@dataclass
class Options:
    flavor: str
    profile: str
    base_image: str
    mirror: str | None
    build_options: list[str]
    skip: set[str]
    out: Path
    root: Path


def timed(action: Callable[[], object]) -> float:
    start = time.monotonic()
    action()
    return time.monotonic() - start


def _stream(
    argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> None:
    from efa_image.runner import run_command

    run_command(argv, stream=True, env=env, cwd=cwd)


def image_size(ref: str) -> int:
    from efa_image.building import images

    return images.image_size(ref)


def place_verified(source: Path, artifact: Artifact, dest: Path) -> Path:
    """Copy a verified file to dest, readable by all, and check its digest there before use.

    A copy, not a link: docker's layer cache keys COPY by the file's mode as well
    as its content, and the artifact cache keeps its files private (0600), so a
    link would make the recipe's cache depend on where the file came from."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f".{dest.name}.partial")
    shutil.copyfile(source, partial)
    os.chmod(partial, 0o644)
    os.replace(partial, dest)
    actual = digest_of(dest, artifact.digest_kind)
    if actual != artifact.digest:
        raise BenchError(
            f"{dest}: {artifact.digest_kind} {actual} is not the lock's {artifact.digest} "
            f"({artifact.name} {artifact.version})"
        )
    return dest


def obtain(artifact: Artifact, mirror: str | None) -> Path:
    """The verified file from the user's artifact cache, filled from the mirror or,
    where the mirror lacks it, from the lock's URLs."""
    try:
        return Store(mirror=mirror).get(artifact)
    except ArtifactError as exc:
        if not mirror:
            raise BenchError(f"bench needs {artifact.name} {artifact.version}: {exc}") from exc
        print(f"bench: {artifact.name} {artifact.version} is not in {mirror}; trying its URLs")
        try:
            return Store().get(artifact)
        except ArtifactError as upstream:
            raise BenchError(
                f"bench needs {artifact.name} {artifact.version} ({artifact.filename}), in "
                f"neither {mirror} ({exc}) nor at its URLs ({upstream}). Put it into the mirror: "
                f"`efa-image mirror create {mirror} --profile {DOC_PROFILE} --lock-overlay "
                f"{BUMP_OVERLAY} --name {artifact.name}` where its URL is reachable"
            ) from upstream


class Bench:
    def __init__(self, options: Options, work: Path) -> None:
        from efa_image.building.flavors import load_catalog

        self.options = options
        self.work = work
        self.catalog = load_catalog()
        self.runs: dict[str, Run] = {}
        self.skipped: dict[str, str] = {}
        self.base_bytes = 0
        # The bench's registry while it serves: its address and its log.
        self.registry: str | None = None
        self.registry_log: Path | None = None
        # What the one-bump moves: name -> (version before, after).
        self.bumped = moved_components(self.lock(options.profile), self.lock(options.profile, True))

    # Locks ---------------------------------------------------------------------------

    def lock(self, profile: str, bump: bool = False) -> Lock:
        """The lock as `efa-image build --profile PROFILE` loads it (bump: with the overlay)."""
        from efa_image.artifacts import lock
        from efa_image.artifacts.context import with_profile_overlay

        overlays = [*lock.env_overlays(), *([self.options.root / BUMP_OVERLAY] if bump else [])]
        return lock.load(None, with_profile_overlay(self.catalog, profile, overlays))

    # The project's builds ------------------------------------------------------------

    def project(
        self,
        name: str,
        profile: str,
        cache: Path,
        cold: bool,
        bump: bool,
        extra: Sequence[str] = (),
        checkout: Path | None = None,
    ) -> Run:
        """`efa-image build`, timed; extra: options for the registry; checkout: run from there."""
        root = checkout or self.options.root
        report = self.options.out / f"{self.options.flavor}-{self.options.profile}-{name}.json"
        report.unlink(missing_ok=True)
        argv = [
            sys.executable, "-m", "efa_image", "build",
            "--flavor", self.options.flavor, "--profile", profile,
            "--base-image", self.options.base_image,
            "--repository", REPOSITORY, "--report", str(report),
        ]  # fmt: skip
        if self.options.mirror:
            argv += ["--mirror", self.options.mirror]
        if bump:
            argv += ["--lock-overlay", str(root / BUMP_OVERLAY)]
        if cold:
            argv.append("--rebuild")
        argv += [*extra, *self.options.build_options]
        env = {"EFA_IMAGE_CACHE": str(cache), "EFA_IMAGE_BUILD_CACHE": str(cache / "builds")}
        if checkout:
            env.update(checkout_env(checkout))
        label = f"{self.options.flavor}/{profile} {name}"
        where = f" (in {checkout})" if checkout else ""
        print(f"==> bench: {label}{where}: {' '.join(argv[1:])}", flush=True)
        log = self.registry_log
        start = log_offset(log) if log else 0
        seconds = self._run(label, lambda: _stream(argv, env, cwd=root))
        run = project_run(name, label, seconds, read_build_report(report), self.base_bytes)
        if not run.image_bytes and run.image:
            run.image_bytes = image_size(run.image)
        if extra:
            run.details["registry_options"] = list(extra)
        moved = ""
        if log:
            run.details["registry_bytes"] = bytes_sent(log, start, log_offset(log))
            moved = f", {run.details['registry_bytes'] / 1e6:.0f} MB from the registry"
        print(
            f"==> bench: {label}: {seconds:.1f} s, {run.image_bytes / 1e6:.0f} MB{moved}",
            flush=True,
        )
        return run

    # The doc recipe ------------------------------------------------------------------

    def doc_context(self, lock: Lock, where: Path) -> dict[str, str]:
        """A build context holding the recipe's archives, verified; its --build-args."""
        shutil.rmtree(where, ignore_errors=True)
        for name in DOC_ARGS:
            artifact = lock.get(name)
            place_verified(
                obtain(artifact, self.options.mirror), artifact, where / artifact.filename
            )
        return doc_build_args(lock, self.options.base_image)

    def doc(self, name: str, lock: Lock, context: Path, no_cache: bool, tag: str) -> Run:
        prepare = time.monotonic()
        if not context.is_dir():
            self.doc_context(lock, context)
        args = doc_build_args(lock, self.options.base_image)
        prepare_seconds = round(time.monotonic() - prepare, 1)
        dockerfile = self.options.root / DOC_DOCKERFILE
        argv = ["docker", "build", "-f", str(dockerfile), "-t", tag]
        argv += [f"--build-arg={key}={value}" for key, value in args.items()]
        if no_cache:
            argv.append("--no-cache")
        argv.append(str(context))
        label = f"doc recipe {name.removeprefix('doc-')}"
        print(f"==> bench: {label}: {' '.join(argv)}", flush=True)
        seconds = self._run(label, lambda: _stream(argv))
        self._check_doc_image(label, tag, lock)
        run = Run(
            name=name,
            label=label,
            seconds=round(seconds, 1),
            image=tag,
            image_bytes=image_size(tag),
            base_bytes=self.base_bytes,
            details={"build_args": args, "prepare_seconds": prepare_seconds},
        )
        print(f"==> bench: {label}: {seconds:.1f} s, {run.image_bytes / 1e6:.0f} MB", flush=True)
        return run

    def _check_doc_image(self, label: str, tag: str, lock: Lock) -> None:
        openmpi = lock.get("openmpi").version
        code = str(nccl_version_code(lock.get("nccl_wheel").version))
        argv = ["docker", "run", "--rm", tag, "sh", "-c", DOC_CHECK, "sh", openmpi, code]
        self._run(f"{label} (check of its image)", lambda: _stream(argv))

    # Sequencing ----------------------------------------------------------------------

    def _run(self, label: str, action: Callable[[], object]) -> float:
        try:
            return timed(action)
        except EfaImageError as exc:
            raise BenchError(f"{label} failed: {exc}") from exc

    def seed(self, lock: Lock, names: Sequence[str], cache: Path) -> None:
        """Put the bumped artifacts into a run's cache, so a rebuild times no download."""
        store = Store(cache_dir=cache)
        for name in names:
            artifact = lock.get(name)
            place_verified(
                obtain(artifact, self.options.mirror), artifact, store.cached_path(artifact)
            )

    def all(self) -> None:
        from efa_image.building import base

        options = self.options
        print(base.ensure_ref(options.base_image), flush=True)
        self.base_bytes = image_size(options.base_image)
        cache = self.work / "cache"
        doc_lock = self.lock(DOC_PROFILE)
        bump_lock = self.lock(options.profile, bump=True)
        doc_tag = f"{REPOSITORY}:aws-doc-recipe"
        with self.serving_registry():
            # The cold run fills the registry the fresh runs take from (when they run).
            publish = publish_options(self.registry, cache / "builds") if self.registry else []
            self._add(
                self.project("cold", options.profile, cache, cold=True, bump=False, extra=publish)
            )
            self._add(self.project("unchanged", options.profile, cache, cold=False, bump=False))
            if "doc" in options.skip:
                for name in DOC_RUNS:
                    self.skipped[name] = "--skip doc"
            else:
                context = self.work / "doc-context"
                self._add(self.doc("doc-cold", doc_lock, context, True, doc_tag))
                self._add(self.doc("doc-unchanged", doc_lock, context, False, doc_tag))
            if "one-bump" in options.skip:
                self.skipped["one-bump"] = self.skipped["doc-one-bump"] = "--skip one-bump"
            else:
                self.seed(bump_lock, list(self.bumped), cache)
                self._add(self.project("one-bump", options.profile, cache, cold=False, bump=True))
                skip_doc = [name for name in ("doc", "doc-one-bump") if name in options.skip]
                if skip_doc:
                    self.skipped["doc-one-bump"] = f"--skip {skip_doc[0]}"
                else:
                    doc_bump_lock = self.lock(DOC_PROFILE, bump=True)
                    context = self.work / "doc-context-one-bump"
                    tag = f"{doc_tag}-one-bump"
                    self._add(self.doc("doc-one-bump", doc_bump_lock, context, False, tag))
            self.distro()
            self.fresh()

    @contextlib.contextmanager
    def serving_registry(self) -> Iterator[None]:
        """The bench's registry on loopback through every run, where the fresh runs use it."""
        reason = self.fresh_skip_reason()
        if reason:
            for name in FRESH_RUNS:
                self.skipped[name] = reason
            yield
            return
        directory = self.work / "registry"
        with contextlib.ExitStack() as stack:
            try:
                address = stack.enter_context(local_registry(directory, access_log=True))
            except RegistryError as exc:
                raise BenchError(f"the bench's registry did not start: {exc}") from exc
            self.registry, self.registry_log = address, directory / LOG
            print(f"==> bench: registry {address}, access log {self.registry_log}", flush=True)
            try:
                yield
            finally:
                # Kept beside the report: the bytes each run took can be checked against it.
                shutil.copyfile(self.registry_log, self.registry_log_copy())
                self.registry = self.registry_log = None

    def registry_log_copy(self) -> Path:
        return self.options.out / f"{self.options.flavor}-{self.options.profile}-registry.log"

    def fresh_skip_reason(self) -> str | None:
        if "fresh" in self.options.skip:
            return "--skip fresh"
        if not registry_installed():
            return f"{REGISTRY} (the CNCF distribution registry) is not installed: `make setup`"
        return None

    def fresh(self) -> None:
        """A fresh machine with a warm registry: the second checkout, empty caches, and none
        of the images the project's runs built (the base image and the recipe's stay)."""
        if not self.registry:
            return
        checkout = make_checkout(self.options.root, self.work / "checkout")
        check_checkout(checkout)
        for name in FRESH_RUNS:
            bump = name == "fresh-one-bump"
            if bump and "one-bump" in self.options.skip:
                self.skipped[name] = "--skip one-bump"
                continue
            self.remove_project_images()
            cache = self.work / f"{name}-cache"
            self._add(
                self.project(
                    name,
                    self.options.profile,
                    cache,
                    cold=False,
                    bump=bump,
                    extra=fresh_options(self.registry),
                    checkout=checkout,
                )
            )

    def remove_project_images(self) -> None:
        """Untag and remove every image the project's runs reported, never the base image."""
        from efa_image.building import base

        for image in project_images(self.runs, keep=[base.image_id(self.options.base_image)]):
            proc = subprocess.run(
                ["docker", "image", "rm", "--force", image],
                capture_output=True,
                text=True,
                check=False,
            )
            if base.image_id(image):
                raise BenchError(
                    f"could not remove {image} before the fresh runs: {proc.stderr.strip()}"
                )
            print(f"==> bench: removed {image}", flush=True)

    def distro(self) -> None:
        if "distro" in self.options.skip:
            self.skipped[DISTRO_RUN] = "--skip distro"
        elif DISTRO_PROFILE not in self.catalog.profiles:
            self.skipped[DISTRO_RUN] = (
                f"no profile {DISTRO_PROFILE!r} in playbooks/group_vars/all/flavors.yml yet"
            )
        elif self.options.profile == DISTRO_PROFILE:
            self.runs[DISTRO_RUN] = self.runs["cold"]
        else:
            cache = self.work / "distro-cache"
            self._add(self.project(DISTRO_RUN, DISTRO_PROFILE, cache, cold=True, bump=False))

    def _add(self, run: Run) -> None:
        self.runs[run.name] = run


def machine() -> dict[str, Any]:
    memory = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) * 1024
    except OSError:
        pass
    docker = subprocess.run(
        ["docker", "version", "--format", "{{.Server.Version}}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {
        "cpus": os.cpu_count(),
        "memory_bytes": memory,
        "kernel": platform.release(),
        "docker": docker,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="scripts/bench",
        description="Time the flavour and profile cold, unchanged and one-bump, the distro "
        "profile cold, AWS's documented recipe (bench/aws-doc-recipe) the same ways, and "
        "unchanged and one-bump on a fresh machine that has the registry the cold run "
        "pushed to; write build/bench/FLAVOR-PROFILE.json and print the table. Other "
        "options go to `efa-image build`.",
    )
    parser.add_argument("flavor")
    parser.add_argument("profile")
    parser.add_argument("--base-image", metavar="REF", help="default: the flavour's")
    parser.add_argument("--mirror", metavar="DIR|URL", default=os.environ.get("EFA_IMAGE_MIRROR"))
    parser.add_argument(
        "--skip", action="append", choices=SKIPPABLE, default=[], help="leave these runs out"
    )
    return parser.parse_known_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    from efa_image.building.flavors import load_catalog
    from efa_image.setup.engine import ensure_docker

    args, build_options = parse_args(sys.argv[1:] if argv is None else argv)
    root = project_root()
    out = root / "build" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{args.flavor}-{args.profile}.json"
    try:
        ensure_docker()
        catalog = load_catalog()
        options = Options(
            flavor=args.flavor,
            profile=args.profile,
            base_image=args.base_image or catalog.base_image(args.flavor),
            mirror=args.mirror,
            build_options=build_options,
            skip=set(args.skip),
            out=out,
            root=root,
        )
        catalog.methods(args.profile)
    except EfaImageError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 1
    info: dict[str, Any] = {
        "flavor": args.flavor,
        "profile": args.profile,
        "base_image": options.base_image,
        "doc_recipe": {"dockerfile": str(DOC_DOCKERFILE), "profile": DOC_PROFILE},
        "bump_overlay": str(BUMP_OVERLAY),
        "names": {
            "project": f"{args.flavor}/{args.profile}",
            "distro": f"{args.flavor}/{DISTRO_PROFILE}",
        },
        "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
    }
    work = Path(tempfile.mkdtemp(prefix="efa-image-bench.", dir="/var/tmp"))
    failed = None
    bench = None
    try:
        bench = Bench(options, work)
        bench.all()
    except EfaImageError as exc:
        failed = str(exc)
    except KeyboardInterrupt:
        failed = "interrupted"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    runs = bench.runs if bench else {}
    skipped = bench.skipped if bench else {}
    if bench:
        info["base_bytes"] = bench.base_bytes
        info["bumped"] = {
            name: {"from": old, "to": new} for name, (old, new) in bench.bumped.items()
        }
    info["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    notes = [
        *cache_notes(runs, list(info.get("bumped", {}))),
        *fresh_notes(runs),
        *run_notes(info["machine"], runs),
    ]
    report = make_report(info, runs, skipped, notes, failed)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print()
    print(render_table(report))
    print(f"report: {path}")
    if failed:
        print(f"bench: error: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
