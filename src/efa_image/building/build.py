"""`efa-image build`: the request resolved into a plan, then one stage after another.

The stages, each named and timed as it runs: the plan (efa_image.building.plan:
the lock's selection, the base image made present and probed, the
compatibility facts judged, the fingerprint), the pre-flight of the artifacts'
sources, the fetch, `packer build` (efa_image.building.packer), verification,
and the tags. Each stage reads the plan and derives nothing again.

Packer commits the image only when every provisioner succeeded; this module
tags it only after verification passed, so no failed or unverified build is
ever tagged as good. An unchanged build (its fingerprint recorded as verified,
the image still there) tags the earlier image again and runs nothing; with
--reuse-from (or --push), a verified image of the same fingerprint pushed from
another machine is pulled, checked and tagged instead (efa_image.building.published).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import asdict, dataclass, field

from efa_image.artifacts import preflight
from efa_image.artifacts.context import Context, Selection
from efa_image.building import fingerprint, images, packer, published, push
from efa_image.building.plan import Plan, resolve
from efa_image.building.tags import component_tags
from efa_image.errors import EfaImageError
from efa_image.paths import project_root
from efa_image.registry.reference import ecr_of, parse_repository
from efa_image.runner import run_command
from efa_image.timing import StepTimer
from efa_image.types import BuildRequest
from efa_image.verification import multihost, verify
from efa_image.verification.containers import target


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
    # Where the reused image came from: "local" (this machine's record), or the
    # REGISTRY/NAME@DIGEST it was pulled as (efa_image.building.published); "" when built.
    reused_from: str = ""
    # With --push: every pushed REPOSITORY:TAG and its registry digest (efa_image.building.push).
    pushed: dict[str, str] = field(default_factory=dict)
    # The components that came with the base image (method present) and the roles
    # that installed theirs (efa_image.building.basecontents).
    from_base: dict[str, dict] = field(default_factory=dict)
    installed: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def build(request: BuildRequest, context: Context) -> BuildResult:
    timer = StepTimer("image")
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    plan = resolve(request, context, timer)
    result = BuildResult(
        plan.flavor,
        plan.profile,
        request.base_image,
        dict(plan.components),
        started=started,
        fingerprint=plan.fingerprint.digest,
        from_base=plan.from_base,
        installed=plan.installed,
    )
    with timer.step("pre-flight"):
        selection = Selection(list(plan.artifacts), plan.flavor, plan.profile)
        preflight.check_sources(context, selection)
    reusable = None if request.rebuild else reusable_image(plan.fingerprint.digest)
    if reusable:
        result.reused_from = "local"
        return reuse(reusable, plan, result, timer)
    if request.reuse_from and not request.rebuild:
        with timer.step("pull"):
            pulled = pull_verified(request.reuse_from, plan, result)
        if pulled:
            return reuse(pulled, plan, result, timer)
    with timer.step("fetch"):
        for artifact in plan.artifacts:
            context.store.get(artifact)
        print(f"{len(plan.artifacts)} artifacts verified in the cache", flush=True)
    with timer.step("packer build"):
        image = run_packer(plan, context, result)
    with timer.step("verify"):
        try:
            verify_image(image, plan, result)
        except EfaImageError:
            # Nothing that failed verification stays behind to be taken as a build.
            subprocess.run(["docker", "rmi", image], capture_output=True, check=False)
            raise
        fingerprint.record_verified(plan.fingerprint, image)
    with timer.step("tag"):
        tag(image, plan, result)
    return finish(result, timer)


def run_packer(plan: Plan, context: Context, result: BuildResult) -> str:
    """`packer build` with the plan's variables; the committed image, roles' durations
    and the build cache's answers into the result."""
    root = project_root()
    out = root / "build"
    out.mkdir(exist_ok=True)
    # Per build process: builds side by side (make test's steps) must never read
    # each other's variables or image. An earlier run's manifest is never this run's.
    var_file = out / f"{plan.flavor}-{plan.profile}.{os.getpid()}.pkrvars.json"
    manifest = out / f"packer-manifest.{os.getpid()}.json"
    manifest.unlink(missing_ok=True)
    variables = packer.packer_vars(
        plan.request,
        dict(plan.components),
        plan.base.path,
        f"pid:{os.getpid()}",
        plan.base.cuda.home,
        plan.fingerprint.digest,
        str(manifest),
        allow_unpinned=context.store.allow_unpinned,
        env=context.catalog.image_env.get(plan.flavor),
        path_extra=context.catalog.image_path.get(plan.flavor),
    )
    var_file.write_text(json.dumps(variables, indent=2) + "\n")
    try:
        image, output = packer.packer_build(root, var_file, manifest)
    finally:
        var_file.unlink(missing_ok=True)
    # Where users and the README look for the last build's manifest.
    manifest.replace(out / "packer-manifest.json")
    result.roles = packer.role_durations(output)
    result.build_cache = packer.build_cache_outcomes(output)
    return image


def reusable_image(digest: str) -> str | None:
    """The verified image of an identical earlier build, while it exists with its label."""
    image = fingerprint.verified_image(digest)
    if image and images.label(image, fingerprint.LABEL) == digest:
        return image
    return None


def pull_verified(repository_text: str, plan: Plan, result: BuildResult) -> str | None:
    """The verified image of this fingerprint from the registry, recorded here; None (and
    one line) when the registry has none, cannot be reached, or serves something else."""
    repository = parse_repository(repository_text)
    digest = plan.fingerprint.digest
    try:
        record = published.find(repository, digest)
        if record is None:
            print(f"no verified image of fingerprint {digest[:16]} in {repository.ref}: building")
            return None
        if ecr := ecr_of(repository):
            push.ecr_login(ecr, consequence="nothing was pulled")
        image = published.pull(repository, record)
    except (EfaImageError, OSError, ValueError) as exc:
        print(f"reuse from {repository.ref}: {exc}; building", flush=True)
        return None
    fingerprint.record_verified(
        plan.fingerprint, image, origin=f"{repository.ref}@{record.manifest}"
    )
    result.reused_from = f"{repository.ref}@{record.manifest}"
    return image


def reuse(image: str, plan: Plan, result: BuildResult, timer: StepTimer) -> BuildResult:
    """An unchanged build: the earlier verified image is tagged again, nothing runs."""
    where = "" if result.reused_from == "local" else f", pulled from {result.reused_from}"
    print(
        f"unchanged: every input matches verified image {image} (fingerprint "
        f"{result.fingerprint[:16]}{where}); tagging it (--rebuild builds anyway)",
        flush=True,
    )
    result.reused = True
    with timer.step("tag"):
        tag(image, plan, result)
    return finish(result, timer)


def finish(result: BuildResult, timer: StepTimer) -> BuildResult:
    """The stage durations into the result, and the summary a build ends with."""
    result.stages = {step.name: round(step.seconds, 1) for step in timer.steps}
    print(timer.summary())
    print_summary(result)
    return result


def tag(image: str, plan: Plan, result: BuildResult) -> None:
    """Tag the verified image; its tags and size go into the result."""
    names = component_tags(plan.flavor, plan.profile, plan.components)
    tags = [f"{plan.request.repository}:{name}" for name in names]
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


def verify_image(image: str, plan: Plan, result: BuildResult) -> None:
    """EFA userspace, image ENV, compatibility, GDRCopy, and an MPI job across two containers."""
    with target(None, image) as run:
        report = verify.verify_efa(run, version=plan.components.get("libfabric"))
        mismatches = images.check_image_env(image, run)
        report.add("image ENV", not mismatches, "; ".join(mismatches) or "matches env.d")
        verify.verify_compat(run, report)
        verify.verify_gdrcopy(run, report)
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
