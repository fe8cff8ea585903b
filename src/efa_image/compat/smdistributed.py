"""smdistributed wheels: which of AWS's builds fits an image, and whether the lock pins it.

AWS builds smdistributed-modelparallel (v1) and smdistributed-dataparallel for
one PyTorch, one CUDA and one Python each, and a wheel in any other image fails
at import. data/smdistributed_builds.yml lists the builds that are known;
the lock (`efa_image_artifacts`) pins the one build per library that an image
installs, with the sha256 that `efa-image lock update` wrote (AWS publishes
none). The rules live here once: the role smdistributed applies them to the
PyTorch it finds on the target (through its filter plugin), and the
pre-flight of `efa-image build` to the lock and the flavour before anything runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from efa_image.artifacts.lock import Artifact
from efa_image.compat.pytorch import Image, cuda_tag, lock_image
from efa_image.datafiles import read_yaml
from efa_image.errors import EfaImageError

DATA = "smdistributed_builds.yml"
LIBRARIES = ("modelparallel", "dataparallel")
# The lock entries the role installs by default, one per library.
LOCK_NAMES = {library: f"smdistributed_{library}" for library in LIBRARIES}
ROLE = "smdistributed"
REQUIRED = ("version", "pytorch", "cuda", "python", "url")
VERSION = re.compile(r"^\d+(\.\d+)+$")
CUDA = re.compile(r"^\d+\.\d+$")
PYTHON_TAG = re.compile(r"^cp3\d+$")
# Where each library's URL names the PyTorch (and CUDA) it was built against.
URL_NAMES = {
    "modelparallel": "/pytorch-{pytorch}/",
    "dataparallel": "/pytorch/{pytorch}/cu{cuda}/",
}
V2_NOTE = (
    "model parallel v2 (PyTorch 2.x) is no wheel: AWS ships it as an image and a conda "
    "channel (roles/smdistributed/README.md)"
)


class BuildsError(EfaImageError, ValueError):
    """The builds data is malformed; the message names the entry."""


class SelectionError(EfaImageError):
    """No installable build: the message names what would fit and how to fix it."""


@dataclass(frozen=True)
class Fit:
    pytorch: str
    cuda: str


@dataclass(frozen=True)
class Build:
    library: str
    version: str
    pytorch: str
    cuda: str
    python: str
    url: str
    also: tuple[Fit, ...] = ()

    @property
    def distribution(self) -> str:
        return f"smdistributed-{self.library}"

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1]

    @property
    def fits_with(self) -> tuple[Fit, ...]:
        return (Fit(self.pytorch, self.cuda), *self.also)

    def fits(self, image: Image) -> bool:
        return image.python == self.python and Fit(image.pytorch, image.cuda) in self.fits_with

    def describe(self) -> str:
        """'1.7.0 (PyTorch 1.10.0, cu113, cp38; also PyTorch 1.10.2/cu113)'."""
        also = ", ".join(f"PyTorch {f.pytorch}/{cuda_tag(f.cuda)}" for f in self.also)
        tail = f"; also {also}" if also else ""
        cuda = cuda_tag(self.cuda)
        return f"{self.version} (PyTorch {self.pytorch}, {cuda}, {self.python}{tail})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "library": self.library,
            "distribution": self.distribution,
            "version": self.version,
            "pytorch": self.pytorch,
            "cuda": self.cuda,
            "python": self.python,
            "url": self.url,
            "filename": self.filename,
        }


Builds = Mapping[str, Sequence[Build]]


@dataclass(frozen=True)
class Pin:
    """One lock entry as the role or the CLI sees it (after overlays)."""

    name: str
    version: str
    filename: str
    url: str
    sha256: str

    @classmethod
    def from_mapping(cls, entry: Mapping[str, Any]) -> Pin:
        """The artifact role's artifact_info entry (or any mapping with those keys)."""
        urls = entry.get("urls") or [""]
        return cls(
            str(entry.get("name", "")),
            str(entry.get("version", "")),
            str(entry.get("filename", "")),
            str(urls[0]),
            str(entry.get("sha256") or ""),
        )


def _build(library: str, raw: object, where: str) -> Build:
    if not isinstance(raw, Mapping):
        raise BuildsError(f"{where}: expected a mapping of {', '.join(REQUIRED)}")
    unknown = sorted(set(raw) - {*REQUIRED, "also"})
    missing = [key for key in REQUIRED if not str(raw.get(key) or "").strip()]
    if unknown or missing:
        raise BuildsError(f"{where}: unknown {unknown or 'none'}, missing {missing or 'none'}")
    fields = {key: str(raw[key]).strip() for key in REQUIRED}
    for key, pattern in (("version", VERSION), ("pytorch", VERSION), ("cuda", CUDA)):
        if not pattern.match(fields[key]):
            raise BuildsError(f"{where}.{key}: {fields[key]!r} is not a version such as 12.4")
    if not PYTHON_TAG.match(fields["python"]):
        raise BuildsError(f"{where}.python: {fields['python']!r} is not a tag such as cp311")
    build = Build(library, **fields, also=_also(raw.get("also") or [], f"{where}.also"))
    expected = f"smdistributed_{library}-{build.version}-{build.python}-{build.python}-"
    if not build.url.startswith("https://") or not build.filename.startswith(expected):
        raise BuildsError(f"{where}.url: its file name must start {expected!r} ({build.url})")
    named = URL_NAMES[library].format(pytorch=build.pytorch, cuda=build.cuda.replace(".", ""))
    if named not in build.url:
        raise BuildsError(f"{where}.url: names another PyTorch/CUDA than {named!r} ({build.url})")
    return build


def _also(raw: object, where: str) -> tuple[Fit, ...]:
    if not isinstance(raw, list):
        raise BuildsError(f"{where}: expected a list of {{pytorch, cuda}}")
    fits = []
    for index, item in enumerate(raw):
        if not isinstance(item, Mapping) or set(item) != {"pytorch", "cuda"}:
            raise BuildsError(f"{where}[{index}]: expected {{pytorch: X.Y.Z, cuda: X.Y}}")
        fit = Fit(str(item["pytorch"]), str(item["cuda"]))
        if not VERSION.match(fit.pytorch) or not CUDA.match(fit.cuda):
            raise BuildsError(f"{where}[{index}]: {item!r} is not {{pytorch: X.Y.Z, cuda: X.Y}}")
        fits.append(fit)
    return tuple(fits)


def load_builds(path: Path | str | None = None) -> dict[str, tuple[Build, ...]]:
    """The builds in `path`, or the packaged data/smdistributed_builds.yml, validated."""
    data, where = read_yaml(DATA, path, BuildsError)
    if not isinstance(data, Mapping) or set(data) != set(LIBRARIES):
        raise BuildsError(f"{where}: expected exactly the keys {', '.join(LIBRARIES)}")
    builds: dict[str, tuple[Build, ...]] = {}
    urls: set[str] = set()
    for library in LIBRARIES:
        entries = data[library]
        if not isinstance(entries, list) or not entries:
            raise BuildsError(f"{where}: {library} must be a non-empty list of builds")
        parsed = [_build(library, raw, f"{where}: {library}[{i}]") for i, raw in enumerate(entries)]
        for build in parsed:
            if build.url in urls:
                raise BuildsError(f"{where}: {library} lists {build.url} twice")
            urls.add(build.url)
        builds[library] = tuple(parsed)
    return builds


def fitting(library: str, image: Image, builds: Builds | None = None) -> list[Build]:
    """The builds of `library` that fit the image, newest version first."""
    table = builds if builds is not None else load_builds()
    found = [build for build in table[library] if build.fits(image)]
    return sorted(found, key=lambda b: tuple(int(p) for p in b.version.split(".")), reverse=True)


def known(library: str, builds: Builds | None = None) -> str:
    table = builds if builds is not None else load_builds()
    return ", ".join(build.describe() for build in reversed(table[library]))


def build_for(library: str, pin: Pin, builds: Builds | None = None) -> Build | None:
    """The known build a lock entry pins: the same URL, version and file name."""
    table = builds if builds is not None else load_builds()
    for build in table[library]:
        if (build.url, build.version, build.filename) == (pin.url, pin.version, pin.filename):
            return build
    return None


def library_of(filename: str) -> str | None:
    """'smdistributed_dataparallel-2.6.0-cp311-...whl' -> 'dataparallel'."""
    match = re.match(r"smdistributed_(\w+?)-", filename)
    return match.group(1) if match and match.group(1) in LIBRARIES else None


def _lock_fix(pin: Pin, candidates: Iterable[Build]) -> str:
    listed = "; ".join(f"{b.describe()} {b.url}" for b in candidates)
    return (
        f"set version, filename and urls of {pin.name} in the lock "
        f"(playbooks/group_vars/all/versions.yml) to one of: {listed}; then pin it with "
        f"`efa-image lock update {pin.name}`"
    )


def unpinned_message(pin: Pin) -> str:
    return (
        f"{pin.name} {pin.version} has no sha256 in the lock (AWS publishes none): run "
        f"`efa-image lock update {pin.name}` where its URL is reachable to pin it, or pass "
        "--allow-unpinned (artifact_allow_unpinned=true) to accept it unverified"
    )


def select(
    library: str,
    image: Image,
    pin: Pin,
    allow_unpinned: bool = False,
    builds: Builds | None = None,
) -> Build:
    """The build the lock entry pins, if it fits the image and is pinned; else SelectionError."""
    table = builds if builds is not None else load_builds()
    name = f"smdistributed-{library}"
    if not image.pytorch:
        raise SelectionError(
            f"{name} needs PyTorch in the image's Python ({image.python}), and there is none: "
            "put the pytorch role before smdistributed in the flavour (or use a base image "
            f"with PyTorch and set smdistributed_python to its interpreter), or set "
            f"smdistributed_{library}: false"
        )
    fits = fitting(library, image, table)
    if not fits:
        hint = f"; {V2_NOTE}" if library == "modelparallel" else ""
        raise SelectionError(
            f"no {name} build for {image.describe()}; known: {known(library, table)}. "
            "Build the image with one of those PyTorch/CUDA/Python combinations, or set "
            f"smdistributed_{library}: false{hint}"
        )
    pinned = build_for(library, pin, table)
    if pinned is None or not pinned.fits(image):
        what = pinned.describe() if pinned else f"{pin.version} from {pin.url or 'no URL'}"
        unknown = "" if pinned else f" (no build of src/efa_image/data/{DATA})"
        raise SelectionError(
            f"the lock's {pin.name} is {name} {what}{unknown}, which does not fit "
            f"{image.describe()}: " + _lock_fix(pin, fits)
        )
    if not pin.sha256 and not allow_unpinned:
        raise SelectionError(unpinned_message(pin))
    return pinned


def plan(
    probe: Mapping[str, Any],
    pins: Mapping[str, Mapping[str, Any]],
    allow_unpinned: bool = False,
    builds: Builds | None = None,
) -> dict[str, Any]:
    """For the role: every wanted library's build, or one message naming every refusal.

    `probe` is what the role read from the image's Python (torch, cuda, python);
    `pins` maps each wanted library to its lock entry as the artifact role resolved it.
    """
    image = Image.from_probe(probe.get("torch"), probe.get("cuda"), str(probe.get("python", "")))
    chosen: dict[str, Any] = {}
    problems = []
    for library, entry in pins.items():
        if library not in LIBRARIES:
            problems.append(f"unknown library {library!r} (known: {', '.join(LIBRARIES)})")
            continue
        try:
            chosen[library] = select(
                library, image, Pin.from_mapping(entry), allow_unpinned, builds
            ).to_dict()
        except SelectionError as error:
            problems.append(str(error))
    result: dict[str, Any] = {"image": image.__dict__, "builds": chosen}
    return {**result, "ok": not problems, "message": " | ".join(problems)}


def lock_problems(
    artifacts: Sequence[Artifact], roles: Sequence[str] | None, builds: Builds | None = None
) -> list[str]:
    """What the pre-flight refuses before a build: the flavour and the lock's entries.

    Each smdistributed entry must be a known build and, in a flavour's build
    whose artifacts install PyTorch (its wheel's file name, the CUDA runtime
    wheel's version), fit that PyTorch.

    `artifacts` are what a build needs; `roles` the flavour's roles, None when
    the command names no flavour.
    """
    table = builds if builds is not None else load_builds()
    problems = []
    without = roles is not None and ROLE in roles and "pytorch" not in roles[: roles.index(ROLE)]
    if without:
        problems.append(
            "the flavour holds smdistributed without pytorch before it: both libraries load "
            "PyTorch and fit one PyTorch build only; put pytorch before smdistributed in its "
            "roles (playbooks/group_vars/all/flavors.yml)"
        )
    # The PyTorch the same image gets (the pytorch role's wheels), where it does;
    # only for a flavour's build: a mirror or a fetch by name holds what no one
    # image installs together.
    image = lock_image(artifacts) if roles is not None else None
    for artifact in artifacts:
        if artifact.role != ROLE:
            continue
        library = library_of(artifact.filename)
        url = artifact.urls[0] if artifact.urls else ""
        pin = Pin(artifact.name, artifact.version, artifact.filename, url, artifact.sha256 or "")
        build = build_for(library, pin, table) if library else None
        if library is None or build is None:
            problems.append(
                f"lock entry {artifact.name} ({artifact.version}, {artifact.filename}) is no known "
                f"smdistributed build: its version, filename and first URL must be those of one "
                f"build in src/efa_image/data/{DATA}"
            )
        elif image is not None and image.cuda and not build.fits(image):
            fits = fitting(library, image, table)
            advice = _lock_fix(pin, fits) if fits else f"no {build.distribution} build fits it"
            problems.append(
                f"the lock pins {build.distribution} {build.describe()}, which does not fit the "
                f"lock's {image.describe()}: {advice}"
            )
    return problems


def check_lock(
    artifacts: Sequence[Artifact], roles: Sequence[str] | None, builds: Builds | None = None
) -> None:
    """lock_problems, raised as one SelectionError."""
    if problems := lock_problems(artifacts, roles, builds):
        raise SelectionError(
            "smdistributed pre-flight, nothing was fetched or built:\n"
            + "\n".join(f"  - {problem}" for problem in problems)
        )
