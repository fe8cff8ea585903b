"""`efa-image build`'s request resolved once, into the plan every later stage reads.

A request names a flavor, a profile and a base image; what the build is made
of follows from the catalog (roles, the profile's methods), the lock (the
artifacts), and the base image (what it already holds, its CUDA, its
distribution's libfabric). Each of those is looked up here once, in this
order, each step timed: the lock's selection, the base image made present and
probed (one container per probe), the compatibility facts judged (one check,
which stops the build before any artifact source is asked), the fingerprint.
The pre-flight, fetch, Packer, verification and tagging (efa_image.building.build)
then read the plan and derive nothing again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from efa_image.artifacts.context import Context
from efa_image.artifacts.lock import Artifact
from efa_image.building import base, basecontents, distro, fingerprint, images
from efa_image.compat import planned, rules, smdistributed
from efa_image.errors import EfaImageError
from efa_image.paths import project_root
from efa_image.timing import StepTimer
from efa_image.types import BuildRequest


@dataclass(frozen=True)
class BaseImage:
    """The base image as the build found it, each fact probed once."""

    ref: str
    image_id: str
    # Its PATH, which the image keeps (efa_image.building.images.base_path).
    path: str
    cuda: images.BaseCuda
    # apt's libfabric, asked only where the efa role installs the distribution's.
    libfabric: distro.DistroLibfabric | None
    # The flavour's components it already holds; None with --no-detect.
    contents: basecontents.BaseUse | None


@dataclass(frozen=True)
class Plan:
    """What one `efa-image build` builds, from what, and why it can work."""

    # As the build runs it: the base's present methods before the user's extra variables.
    request: BuildRequest
    roles: tuple[str, ...]
    methods: Mapping[str, str]
    # The lock's artifacts of the flavour and profile, and those of them the base lacks.
    locked: tuple[Artifact, ...]
    artifacts: tuple[Artifact, ...]
    # Component -> version as the image will have it (the base's for what it holds).
    components: Mapping[str, str]
    base: BaseImage
    facts: Mapping[str, str]
    compatibility: rules.Check
    fingerprint: fingerprint.Fingerprint

    @property
    def flavor(self) -> str:
        return self.request.flavor

    @property
    def profile(self) -> str:
        return self.request.profile

    @property
    def from_base(self) -> dict[str, dict]:
        """The components that came with the base image (method present)."""
        return self.base.contents.report() if self.base.contents else {}

    @property
    def installed(self) -> list[str]:
        """The roles that install their component."""
        return list(self.base.contents.install if self.base.contents else self.roles)


def component_versions(artifacts: Sequence[Artifact]) -> dict[str, str]:
    """Name -> version; a wheel set's files count once, as the set (pytorch 2.5.1)."""
    return {
        (artifact.wheelset or artifact.name): (artifact.wheelset_version or artifact.version)
        for artifact in artifacts
    }


def resolve(request: BuildRequest, context: Context, timer: StepTimer) -> Plan:
    """The plan of `request`: each fact looked up once, each step named as it runs."""
    catalog = context.catalog
    with timer.step("plan"):
        roles = tuple(catalog.roles(request.flavor))
        methods = catalog.methods(request.profile)
        locked = tuple(context.select(None, request.flavor, request.profile).artifacts)
        print(
            f"flavour {request.flavor}, profile {request.profile}: roles {', '.join(roles)}; "
            f"{len(locked)} artifacts in the lock",
            flush=True,
        )
    with timer.step("base image"):
        print(base.ensure_ref(request.base_image, context.store), flush=True)
        image_id = images.image_id(request.base_image)
        # Even an unchanged build cleans up after interrupted ones.
        images.remove_stale_build_containers()
    with timer.step("base probe"):
        probed = probe_base(request, image_id, roles, methods, component_versions(locked))
    request, artifacts, components = use_base_contents(request, locked, probed.contents)
    with timer.step("compatibility"):
        facts, check = judge(request, roles, methods, artifacts, probed)
    with timer.step("fingerprint"):
        inputs = fingerprint.compute(
            project_root(),
            flavor=request.flavor,
            profile=request.profile,
            flavor_roles=roles,
            base_image_id=image_id,
            artifacts=artifacts,
            overlays=[Path(p) for p in request.overlays],
            extra_vars=request.extra_vars,
        )
    return Plan(
        request, roles, methods, locked, artifacts, components, probed, facts, check, inputs
    )


def use_base_contents(
    request: BuildRequest, locked: Sequence[Artifact], contents: basecontents.BaseUse | None
) -> tuple[BuildRequest, tuple[Artifact, ...], dict[str, str]]:
    """The roles whose component the base has get method present (extra variables
    before the user's, hence in the fingerprint); their artifacts are not fetched,
    their versions are the base's. Returns the request as built, the artifacts to
    fetch and every component's version."""
    if contents is None:
        return request, tuple(locked), component_versions(locked)
    artifacts = tuple(a for a in locked if a.role not in contents.present)
    components = {**component_versions(artifacts), **contents.versions()}
    request = replace(request, extra_vars=contents.extra_vars() + request.extra_vars)
    return request, artifacts, components


def probe_base(
    request: BuildRequest,
    image_id: str,
    roles: Sequence[str],
    methods: Mapping[str, str],
    locked: Mapping[str, str],
) -> BaseImage:
    """CUDA, PATH, apt's libfabric and the flavour's components in the base, printed.

    `locked`: the lock's versions, which a base PyTorch must match.
    """
    ref = request.base_image
    cuda = images.probe_cuda(ref)
    print(f"CUDA in the base image: {cuda.version or 'none'} {cuda.home}", flush=True)
    libfabric = distro.probe_for(ref, dict(methods))
    if not request.detect:
        contents = None
        print(f"base contents: not looked for (--no-detect); to install: {', '.join(roles)}")
    else:
        contents = basecontents.base_use(basecontents.probe(ref), list(roles), dict(locked))
        print(contents.render(ref), flush=True)
    return BaseImage(ref, image_id, images.base_path(ref), cuda, libfabric, contents)


def judge(
    request: BuildRequest,
    roles: Sequence[str],
    methods: Mapping[str, str],
    artifacts: Sequence[Artifact],
    probed: BaseImage,
) -> tuple[dict[str, str], rules.Check]:
    """Every compatibility fact of the build, judged once; a violation stops it here,
    before any artifact source is asked and anything is fetched or built."""
    smdistributed.check_lock(artifacts, roles)
    facts = planned.compat_facts(
        list(artifacts), list(roles), dict(methods), probed.cuda, probed.libfabric
    )
    facts.update(base_facts(probed.contents.report() if probed.contents else {}))
    check = planned.check_compatibility(facts)
    if not probed.cuda.home and planned.needs_nvcc(list(artifacts)):
        raise EfaImageError(
            f"flavour {request.flavor} with profile {request.profile} compiles against CUDA, "
            f"and {request.base_image} has no nvcc: use a CUDA devel base image "
            "(nvidia/cuda:<ver>-devel-ubuntu22.04, or efa-image/base:debian13-cuda here)"
        )
    return facts, check


def base_facts(from_base: Mapping[str, dict]) -> dict[str, str]:
    """The compatibility facts of the components the base brings: their versions, and
    libfabric judged as the EFA installer's where the installer's record is there."""
    facts = {"nccl": from_base["nccl"]["version"]} if "nccl" in from_base else {}
    if efa := from_base.get("efa"):
        facts["libfabric"] = efa["version"]
        installer = efa["detail"].get("installer", "")
        facts["efa_method"] = "efa_installer" if installer else "source"
        if installer:
            facts["efa_installer"] = installer
    return facts
