"""`efa-image build`: base image, pre-flight, packer build, verify, then tag.

Packer commits the image only when every provisioner succeeded; this module
tags it only after verification passed, so no failed or unverified build is
ever tagged as good.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from efa_image import base, compat, multihost, verify
from efa_image.artifacts import Store, preflight_report
from efa_image.containers import target
from efa_image.errors import EfaImageError
from efa_image.flavors import Catalog
from efa_image.lock import Artifact, Lock
from efa_image.paths import project_root
from efa_image.runner import CommandError, run_command
from efa_image.timing import StepTimer


@dataclass(frozen=True)
class BuildRequest:
    flavor: str
    profile: str
    base_image: str
    repository: str
    mirror: str | None
    overlays: tuple[str, ...]
    extra_vars: tuple[str, ...] = ()
    # Build cache directory (efa_image.buildcache): "" for the default, "off".
    build_cache: str = ""


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

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def component_versions(artifacts: list[Artifact]) -> dict[str, str]:
    return {artifact.name: artifact.version for artifact in artifacts}


def tags_for(request: BuildRequest, versions: dict[str, str]) -> list[str]:
    """`efa-portable` and one naming every component version, docker-tag safe."""
    parts = [f"{name.replace('_', '')}{version}" for name, version in sorted(versions.items())]
    detailed = re.sub(r"[^A-Za-z0-9_.-]", "-", "-".join([request.flavor, request.profile, *parts]))
    return [f"{request.flavor}-{request.profile}", detailed[:128]]


def base_path(image: str) -> str:
    """The PATH the base image sets (nvidia/cuda adds /usr/local/cuda/bin, for one)."""
    result = run_command(["docker", "image", "inspect", "--format", "{{json .Config.Env}}", image])
    for item in json.loads(result.output or "null") or []:
        if item.startswith("PATH="):
            return item[len("PATH=") :]
    return DEFAULT_PATH


@dataclass(frozen=True)
class BaseCuda:
    """CUDA in the base image: where nvcc lives and which version it is ("" when none)."""

    home: str = ""
    version: str = ""

    @property
    def major(self) -> str:
        return self.version.split(".")[0] if self.version else ""


CUDA_HOMES = ("/usr/local/cuda", "/usr/lib/nvidia-cuda-toolkit")
CUDA_PROBE = (
    'for d in "$@"; do if [ -x "$d/bin/nvcc" ]; then echo "home $d"; '
    '"$d/bin/nvcc" --version | sed -n "s/.*release \\([0-9.]*\\),.*/version \\1/p"; '
    "exit 0; fi; done; "
    # Runtime images have no nvcc; NVIDIA's set CUDA_VERSION.
    'if [ -n "${CUDA_VERSION:-}" ]; then echo "version $CUDA_VERSION"; fi'
)


def probe_cuda(image: str) -> BaseCuda:
    """NVIDIA's layout (nvidia/cuda) or Debian's nvidia-cuda-toolkit, found by nvcc."""
    shell = ["docker", "run", "--rm", "--entrypoint", "/bin/sh", image]
    result = run_command([*shell, "-c", CUDA_PROBE, "probe", *CUDA_HOMES])
    found = dict(line.split(" ", 1) for line in result.output.splitlines() if " " in line)
    return BaseCuda(found.get("home", ""), found.get("version", ""))


def compat_facts(
    needed: list[Artifact], roles: list[str], methods: dict[str, str], cuda: BaseCuda
) -> dict[str, str]:
    """What the compatibility rules (efa_image.compat) know before a build starts."""
    artifacts = {artifact.name: artifact for artifact in needed}
    facts = {"efa_method": methods.get("efa", "")}
    if "efa_installer" in artifacts:
        facts["efa_installer"] = artifacts["efa_installer"].version
    if "libfabric" in artifacts:
        facts["libfabric"] = artifacts["libfabric"].version
    if "nccl" in roles:
        source = artifacts.get("nccl") or artifacts.get("nccl_wheel")
        if source:
            facts["nccl"] = source.version
        if "nccl_wheel" in artifacts:
            major = compat.nccl_cuda_major(artifacts["nccl_wheel"].filename)
            if major:
                facts["nccl_cuda_major"] = major
    if "aws_ofi_nccl" in artifacts:
        facts["aws_ofi_nccl"] = artifacts["aws_ofi_nccl"].version
    if cuda.major:
        facts["base_cuda_major"] = cuda.major
    return facts


def check_compatibility(facts: dict[str, str]) -> compat.Check:
    """Every rule's outcome is printed; violations stop the build before any build work."""
    result = compat.check(facts)
    for rule in result.passed:
        print(f"  ok   {rule}")
    for skipped in result.skipped:
        print(f"  skip {skipped.rule}: {skipped.why}")
    for violation in result.violations:
        print(f"  BAD  {violation.rule}: {violation.message}")
    if not result.ok:
        raise EfaImageError(
            "incompatible versions, nothing was built:\n"
            + "\n".join(f"  - {v.message} ({v.reference})" for v in result.violations)
        )
    return result


def packer_vars(
    request: BuildRequest,
    versions: dict[str, str],
    path: str = "",
    owner: str = "manual",
    cuda_home: str = "",
) -> dict[str, object]:
    labels = {f"org.efa-image.component.{name}": v for name, v in versions.items()}
    return {
        "flavor": request.flavor,
        "profile": request.profile,
        "base_image": request.base_image,
        "base_path": path or DEFAULT_PATH,
        "image_repository": request.repository,
        "labels": labels,
        "mirror": request.mirror or "",
        "lock_overlay": ":".join(request.overlays),
        "build_cache": request.build_cache,
        "ansible_extra_vars": list(request.extra_vars),
        "build_owner": owner,
        "cuda_home": cuda_home or CUDA_HOMES[0],
    }


def built_image_id(manifest: Path) -> str:
    """The docker image of Packer's last run, from its manifest post-processor."""
    try:
        data = json.loads(manifest.read_text())
    except FileNotFoundError as exc:
        raise EfaImageError(f"packer wrote no manifest ({manifest})") from exc
    run_uuid = data.get("last_run_uuid")
    for build in data.get("builds", []):
        if build.get("packer_run_uuid") == run_uuid and build.get("builder_type") == "docker":
            return str(build["artifact_id"])
    raise EfaImageError(f"{manifest} names no docker image of the last run ({run_uuid})")


OWNER_LABEL = "org.efa-image.build-owner"
# Source archives that are compiled against CUDA (the wheel and packages are not).
CUDA_ARCHIVES = {"nccl", "aws_ofi_nccl", "nccl_tests"}


def reduced_hint(request: BuildRequest, checks: list) -> str:
    """The efa flavour never leaves the plugin or nccl-tests out silently; say what would."""
    missing = {check.artifact.name for check in checks if not check.ok}
    if request.flavor == "efa" and missing <= {"aws_ofi_nccl", "nccl_tests"}:
        return (
            "Or build the efa-reduced flavour (FLAVOR=efa-reduced), which leaves aws-ofi-nccl "
            "and nccl-tests out: without the plugin NCCL does not use EFA."
        )
    return ""


def needs_nvcc(needed: list[Artifact]) -> bool:
    return any(artifact.name in CUDA_ARCHIVES for artifact in needed)


ROLE_TIME = re.compile(r"^(\S+) -+ (\d+(?:\.\d+)?)s$")


def role_durations(output: str) -> dict[str, float]:
    """Per-role seconds from the ROLES RECAP of ansible.posix.profile_roles."""
    lines = [PACKER_PREFIX.sub("", ANSI.sub("", line)).strip() for line in output.splitlines()]
    start = max((i for i, line in enumerate(lines) if "ROLES RECAP" in line), default=None)
    if start is None:
        return {}
    durations = {}
    for line in lines[start:]:
        if (match := ROLE_TIME.match(line)) and match.group(1) != "total":
            durations[match.group(1)] = float(match.group(2))
    return durations


CACHE_LINE = re.compile(r"build cache: ([a-z0-9_.-]+) [0-9a-f]{16} (hit|miss|off)\b")


def build_cache_outcomes(output: str) -> dict[str, str]:
    """Per component, what the build cache answered (the roles' `build cache:` lines)."""
    return {m.group(1): m.group(2) for m in CACHE_LINE.finditer(ANSI.sub("", output))}


def owner_alive(owner: str) -> bool:
    """Owners are `pid:<n>` of an efa-image build on this machine; others are left alone."""
    if not owner.startswith("pid:") or not owner[4:].isdigit():
        return True
    try:
        os.kill(int(owner[4:]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_build_containers() -> list[str]:
    """Build containers of an interrupted build (killed efa-image or packer) are removed."""
    template = f'{{{{.Names}}}} {{{{.Label "{OWNER_LABEL}"}}}}'
    listing = run_command(
        ["docker", "ps", "-a", "--filter", f"label={OWNER_LABEL}", "--format", template]
    )
    stale = [
        name
        for name, _, owner in (line.partition(" ") for line in listing.output.splitlines())
        if name and not owner_alive(owner)
    ]
    if stale:
        run_command(["docker", "rm", "-f", *stale])
        print(f"removed build containers of interrupted builds: {', '.join(stale)}", flush=True)
    return stale


DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
PACKER_PREFIX = re.compile(r"^\s*(?:==> )?docker\.image:\s?")


def ansible_failure(output: str, limit: int = 40) -> str | None:
    """The failed task as Ansible reported it inside Packer's output, if any."""
    lines = [PACKER_PREFIX.sub("", ANSI.sub("", line)) for line in output.splitlines()]
    failed = [i for i, line in enumerate(lines) if "fatal: [" in line or "failed: [" in line]
    if not failed:
        return None
    start = max((i for i in range(failed[-1]) if lines[i].startswith("TASK [")), default=0)
    block = [line for line in lines[start : failed[-1] + 1] if line.strip()]
    return "\n".join(block[-limit:])


def env_mismatches(image_env: list[str], described: list[dict[str, object]]) -> list[str]:
    """Where the image's ENV differs from what the roles wrote to /opt/efa-image/env.d/."""
    env = dict(item.split("=", 1) for item in image_env)
    path = env.get("PATH", "").split(":")
    problems = []
    for record in described:
        for directory in record.get("path", []):  # type: ignore[union-attr]
            if directory not in path:
                problems.append(f"PATH lacks {directory}")
        for name, value in dict(record.get("env", {})).items():  # type: ignore[call-overload]
            if env.get(name) != value:
                problems.append(f"{name}={env.get(name, '(unset)')}, the roles set {value}")
    return problems


def check_image_env(image: str, run: verify.Run) -> list[str]:
    listing = run("cat /opt/efa-image/env.d/*.json")
    described = [json.loads(chunk) for chunk in split_json(listing.stdout)]
    result = run_command(["docker", "image", "inspect", "--format", "{{json .Config.Env}}", image])
    return env_mismatches(json.loads(result.output) or [], described)


def split_json(text: str) -> list[str]:
    """Concatenated JSON objects (cat of several files) into one string each."""
    decoder, chunks, index = json.JSONDecoder(), [], 0
    while index < len(text.rstrip()):
        while text[index].isspace():
            index += 1
        _, end = decoder.raw_decode(text, index)
        chunks.append(text[index:end])
        index = end
    return chunks


def image_size(ref: str) -> int:
    result = run_command(["docker", "image", "inspect", "--format", "{{.Size}}", ref])
    return int(result.output.strip())


def build(request: BuildRequest, lock: Lock, catalog: Catalog, store: Store) -> BuildResult:
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
    # First, before any slow step: every missing artifact is named within seconds.
    with timer.step("pre-flight"):
        needed = catalog.needed(lock, request.flavor, request.profile)
        checks = store.preflight(needed)
        for check in checks:
            print(f"  {'ok ' if check.ok else 'BAD'} {check.artifact.name}: {check.detail}")
        if any(not check.ok for check in checks):
            other = "portable" if request.profile != "portable" else None
            raise EfaImageError(
                preflight_report(checks, store.mirror, other, reduced_hint(request, checks))
            )
    with timer.step("fetch"):
        for artifact in needed:
            store.get(artifact)
        print(f"{len(needed)} artifacts verified in the cache", flush=True)
    with timer.step("base image"):
        print(base.ensure_ref(request.base_image), flush=True)
        remove_stale_build_containers()
        cuda = probe_cuda(request.base_image)
        print(f"CUDA in the base image: {cuda.version or 'none'} {cuda.home}", flush=True)
    roles = catalog.roles(request.flavor)
    with timer.step("compatibility"):
        facts = compat_facts(needed, roles, catalog.methods(request.profile), cuda)
        check_compatibility(facts)
        if not cuda.home and needs_nvcc(needed):
            raise EfaImageError(
                f"flavour {request.flavor} with profile {request.profile} compiles against CUDA, "
                f"and {request.base_image} has no nvcc: use a CUDA devel base image "
                "(nvidia/cuda:<ver>-devel-ubuntu22.04, or efa-image/base:debian13-cuda here)"
            )
    versions = result.components = component_versions(needed)
    var_file = out / f"{request.flavor}-{request.profile}.pkrvars.json"
    owner = f"pid:{os.getpid()}"
    variables = packer_vars(request, versions, base_path(request.base_image), owner, cuda.home)
    var_file.write_text(json.dumps(variables, indent=2) + "\n")
    manifest = out / "packer-manifest.json"
    # An earlier run's manifest must never be mistaken for this run's result.
    manifest.unlink(missing_ok=True)
    with timer.step("packer build"):
        image, output = packer_build(root, var_file, manifest)
        result.roles = role_durations(output)
        result.build_cache = build_cache_outcomes(output)
    with timer.step("verify"):
        try:
            verify_image(image, versions, result)
        except EfaImageError:
            # Nothing that failed verification stays behind to be taken as a build.
            subprocess.run(["docker", "rmi", image], capture_output=True, check=False)
            raise
    tags = tags_for(request, versions)
    for tag in tags:
        run_command(["docker", "tag", image, f"{request.repository}:{tag}"])
    result.image, result.tags = image, [f"{request.repository}:{tag}" for tag in tags]
    result.image_bytes = image_size(image)
    result.stages = {name: round(secs, 1) for name, secs, _ in timer.records}
    print(timer.summary())
    if result.build_cache:
        cached = ", ".join(f"{name} {state}" for name, state in result.build_cache.items())
        print(f"build cache: {cached}")
    print(f"image {image}: {result.image_bytes / 1e6:.0f} MB, tagged " + ", ".join(result.tags))
    if before := result.cleanup.get("bytes_before"):
        print(f"before clean-up the same components took {int(before) / 1e6:.0f} MB (du of /)")
    return result


def packer_build(root: Path, var_file: Path, manifest: Path) -> tuple[str, str]:
    """Run `packer build` on the docker source; Ansible's own error when a role fails."""
    try:
        completed = run_command(
            [
                "packer",
                "build",
                "-only=docker.image",
                f"-var-file={var_file}",
                str(root / "packer"),
            ],
            stream=True,
            cwd=root,
            # Packer's ansible provisioner runs the ansible-playbook of this environment.
            env={"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"},
        )
    except CommandError as exc:
        failure = ansible_failure(exc.output)
        raise EfaImageError(
            "packer build failed; no image was committed or tagged"
            + (f". Ansible reported:\n{failure}" if failure else f": {exc}")
        ) from exc
    return built_image_id(manifest), completed.output


def verify_image(image: str, versions: dict[str, str], result: BuildResult) -> None:
    """EFA userspace, image ENV, compatibility, and an MPI job across two containers."""
    with target(None, image) as run:
        report = verify.verify_efa(run, version=versions.get("libfabric"))
        mismatches = check_image_env(image, run)
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
