"""`efa-image build`: base image, pre-flight, packer build, verify, then tag.

Packer commits the image only when every provisioner succeeded; this module
tags it only after verification passed, so no failed or unverified build is
ever tagged as good. The steps themselves live elsewhere: the pre-flight in
efa_image.artifacts.preflight, docker inspection in efa_image.building.images, the compatibility
facts in efa_image.compat.planned and Packer in efa_image.building.packer.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from efa_image.artifacts import preflight
from efa_image.artifacts.context import Context
from efa_image.artifacts.lock import Artifact
from efa_image.building import base, basecontents, distro, fingerprint, images, packer
from efa_image.compat.planned import (
    check_compatibility,
    check_lock_compatibility,
    compat_facts,
    needs_nvcc,
)
from efa_image.errors import EfaImageError
from efa_image.paths import project_root
from efa_image.runner import run_command
from efa_image.timing import StepTimer
from efa_image.verification import multihost, verify
from efa_image.verification.containers import target


@dataclass(frozen=True)
class BuildRequest:
    flavor: str
    profile: str
    base_image: str
    repository: str
    mirror: str | None
    overlays: tuple[str, ...]
    extra_vars: tuple[str, ...] = ()
    # Build cache directory (efa_image.building.build_cache): "" for the default, "off".
    build_cache: str = ""
    # Build even when a verified image with the same fingerprint exists.
    rebuild: bool = False
    # Look for the flavour's components in the base image (efa_image.building.basecontents):
    # found ones are verified and recorded (method present), not installed.
    detect: bool = True


@dataclass
class BuildResult:
    """What `efa-image build --report` writes and `make bench` compares."""

    flavor: str
    profile: str
    base_image: str
    components: dict[str, str]
    image: str = ""
    tags: list[str] = field(default_factory=list)
    image_bytes: int = 0
    cleanup: dict[str, object] = field(default_factory=dict)
    stages: dict[str, float] = field(default_factory=dict)
    roles: dict[str, float] = field(default_factory=dict)
    # Per compiled component: hit (taken from the build cache), miss (compiled), off.
    build_cache: dict[str, str] = field(default_factory=dict)
    started: str = ""
    # Every input of the build (efa_image.building.fingerprint); reused: an earlier verified
    # image with the same fingerprint was tagged and nothing was built.
    fingerprint: str = ""
    reused: bool = False
    # With --push: every pushed REPOSITORY:TAG and its registry digest (efa_image.building.push).
    pushed: dict[str, str] = field(default_factory=dict)
    # The components that came with the base image (method present) and the roles
    # that installed theirs (efa_image.building.basecontents).
    from_base: dict[str, dict] = field(default_factory=dict)
    installed: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def component_versions(artifacts: list[Artifact]) -> dict[str, str]:
    """Name -> version; a wheel set's files count once, as the set (pytorch 2.5.1)."""
    return {
        (artifact.wheelset or artifact.name): (artifact.wheelset_version or artifact.version)
        for artifact in artifacts
    }


def tags_for(request: BuildRequest, versions: dict[str, str]) -> list[str]:
    return component_tags(request.flavor, request.profile, versions)


def component_tags(flavor: str, profile: str, versions: dict[str, str]) -> list[str]:
    """`efa-portable` and one naming every component version, docker-tag safe (also what
    efa_image.building.push derives from a built image's labels)."""
    parts = [f"{name.replace('_', '')}{version}" for name, version in sorted(versions.items())]
    detailed = re.sub(r"[^A-Za-z0-9_.-]", "-", "-".join([flavor, profile, *parts]))
    return [f"{flavor}-{profile}", detailed[:128]]


def build(request: BuildRequest, context: Context) -> BuildResult:
    root = project_root()
    out = root / "build"
    out.mkdir(exist_ok=True)
    timer = StepTimer("image")
    result = BuildResult(
        request.flavor,
        request.profile,
        request.base_image,
        {},
        started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    catalog = context.catalog
    roles, methods = catalog.roles(request.flavor), catalog.methods(request.profile)
    # First, before any slow step: every missing artifact named within seconds, and
    # what the lock alone makes incompatible (PyTorch's NCCL and the image's).
    with timer.step("pre-flight"):
        selection = context.select(None, request.flavor, request.profile)
        needed = selection.artifacts
        result.components = component_versions(needed)
        # An image already here that is no recipe of ours (a DLC) is probed first: the
        # pre-flight then asks the sources only for what it lacks.
        early = base.recipe_for(request.base_image) is None and bool(
            base.image_id(request.base_image)
        )
        if early:
            request, needed = use_base_contents(request, roles, needed, result)
        check_lock_compatibility(needed, roles, methods)
        preflight.run(context, replace(selection, artifacts=needed))
    versions = result.components
    with timer.step("base image"):
        print(base.ensure_ref(request.base_image), flush=True)
        base_id = images.image_id(request.base_image)
        # Even an unchanged build cleans up after interrupted ones.
        images.remove_stale_build_containers()
    # What the base holds decides the roles' methods, hence the fingerprint.
    with timer.step("base probe"):
        cuda = images.probe_cuda(request.base_image)
        print(f"CUDA in the base image: {cuda.version or 'none'} {cuda.home}", flush=True)
        if not early:
            request, needed = use_base_contents(request, roles, needed, result)
            versions = result.components
    with timer.step("fingerprint"):
        inputs = fingerprint.compute(
            root,
            flavor=request.flavor,
            profile=request.profile,
            flavor_roles=catalog.roles(request.flavor),
            base_image_id=base_id,
            artifacts=needed,
            overlays=[Path(p) for p in request.overlays],
            extra_vars=request.extra_vars,
        )
        result.fingerprint = inputs.digest
        reusable = None if request.rebuild else reusable_image(inputs.digest)
    if reusable:
        return reuse(reusable, request, result, timer)
    with timer.step("fetch"):
        for artifact in needed:
            context.store.get(artifact)
        print(f"{len(needed)} artifacts verified in the cache", flush=True)
    with timer.step("compatibility"):
        libfabric = distro.probe_for(request.base_image, methods)
        facts = compat_facts(needed, roles, methods, cuda, libfabric)
        check_compatibility({**facts, **base_facts(result.from_base)})
        if not cuda.home and needs_nvcc(needed):
            raise EfaImageError(
                f"flavour {request.flavor} with profile {request.profile} compiles against CUDA, "
                f"and {request.base_image} has no nvcc: use a CUDA devel base image "
                "(nvidia/cuda:<ver>-devel-ubuntu22.04, or efa-image/base:debian13-cuda here)"
            )
    # Per build process: builds side by side (make test's steps) must never read
    # each other's variables or image. An earlier run's manifest is never this run's.
    var_file = out / f"{request.flavor}-{request.profile}.{os.getpid()}.pkrvars.json"
    manifest = out / f"packer-manifest.{os.getpid()}.json"
    manifest.unlink(missing_ok=True)
    owner = f"pid:{os.getpid()}"
    path = images.base_path(request.base_image)
    variables = packer.packer_vars(
        request,
        versions,
        path,
        owner,
        cuda.home,
        inputs.digest,
        str(manifest),
        allow_unpinned=context.store.allow_unpinned,
        env=context.catalog.image_env.get(request.flavor),
        path_extra=context.catalog.image_path.get(request.flavor),
    )
    var_file.write_text(json.dumps(variables, indent=2) + "\n")
    with timer.step("packer build"):
        try:
            image, output = packer.packer_build(root, var_file, manifest)
        finally:
            var_file.unlink(missing_ok=True)
        # Where users and the README look for the last build's manifest.
        manifest.replace(out / "packer-manifest.json")
        result.roles = packer.role_durations(output)
        result.build_cache = packer.build_cache_outcomes(output)
    with timer.step("verify"):
        try:
            verify_image(image, versions, result)
        except EfaImageError:
            # Nothing that failed verification stays behind to be taken as a build.
            subprocess.run(["docker", "rmi", image], capture_output=True, check=False)
            raise
    fingerprint.record_verified(inputs, image)
    tag(image, request, versions, result)
    return finish(result, timer)


def use_base_contents(
    request: BuildRequest, roles: list[str], needed: list[Artifact], result: BuildResult
) -> tuple[BuildRequest, list[Artifact]]:
    """The roles whose component the base has get method present (extra variables,
    hence in the fingerprint); their artifacts are not needed, their versions are
    the base's. Prints what is kept and what will be installed."""
    if not request.detect:
        result.installed = list(roles)
        print(f"base contents: not looked for (--no-detect); to install: {', '.join(roles)}")
        return request, needed
    found = basecontents.probe(request.base_image)
    plan = basecontents.plan(found, roles, result.components)
    print(plan.render(request.base_image), flush=True)
    result.from_base, result.installed = plan.report(), plan.install
    kept = [artifact for artifact in needed if artifact.role not in plan.present]
    result.components = {**component_versions(kept), **plan.versions()}
    return replace(request, extra_vars=plan.extra_vars() + request.extra_vars), kept


def base_facts(from_base: dict[str, dict]) -> dict[str, str]:
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


def reusable_image(digest: str) -> str | None:
    """The verified image of an identical earlier build, while it exists with its label."""
    image = fingerprint.verified_image(digest)
    if image and images.label(image, fingerprint.LABEL) == digest:
        return image
    return None


def reuse(image: str, request: BuildRequest, result: BuildResult, timer: StepTimer) -> BuildResult:
    """An unchanged build: the earlier verified image is tagged again, nothing runs."""
    print(
        f"unchanged: every input matches verified image {image} (fingerprint "
        f"{result.fingerprint[:16]}); tagging it again (--rebuild builds anyway)",
        flush=True,
    )
    result.reused = True
    tag(image, request, result.components, result)
    return finish(result, timer)


def finish(result: BuildResult, timer: StepTimer) -> BuildResult:
    """The stage durations into the result, and the summary a build ends with."""
    result.stages = {name: round(secs, 1) for name, secs, _ in timer.records}
    print(timer.summary())
    print_summary(result)
    return result


def tag(image: str, request: BuildRequest, versions: dict[str, str], result: BuildResult) -> None:
    """Tag the verified image; its tags and size go into the result."""
    tags = [f"{request.repository}:{name}" for name in tags_for(request, versions)]
    for name in tags:
        run_command(["docker", "tag", image, name])
    result.image, result.tags = image, tags
    result.image_bytes = images.image_size(image)


def print_summary(result: BuildResult) -> None:
    if result.build_cache:
        cached = ", ".join(f"{name} {state}" for name, state in result.build_cache.items())
        print(f"build cache: {cached}")
    print(
        f"image {result.image}: {result.image_bytes / 1e6:.0f} MB, tagged " + ", ".join(result.tags)
    )
    if before := result.cleanup.get("bytes_before"):
        print(f"before clean-up the same components took {int(before) / 1e6:.0f} MB (du of /)")


def verify_image(image: str, versions: dict[str, str], result: BuildResult) -> None:
    """EFA userspace, image ENV, compatibility, and an MPI job across two containers."""
    with target(None, image) as run:
        report = verify.verify_efa(run, version=versions.get("libfabric"))
        mismatches = images.check_image_env(image, run)
        report.add("image ENV", not mismatches, "; ".join(mismatches) or "matches env.d")
        verify.verify_compat(run, report)
        cleanup = run("cat /opt/efa-image/cleanup.json")
        if cleanup.rc == 0:
            result.cleanup = json.loads(cleanup.stdout)
        has_check = run(f"test -x {multihost.CHECK}").rc == 0
    print(report.render(), flush=True)
    job_ok = True
    if has_check:
        job = multihost.run_job(image, 2)
        print(job.render(), flush=True)
        job_ok = job.ok
    if not report.ok or not job_ok:
        raise EfaImageError(f"image {image} failed verification; it was removed, not tagged")
