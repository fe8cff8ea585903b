"""`efa-image push` and `build --push`: a verified image into a registry, with its tags.

SageMaker pulls training images only from a registry (ECR). Only an image that
passed verification here is pushed: its fingerprint label must name a verified
build recorded under the artifact cache's `images/` (efa_image.building.fingerprint),
for that very image ID. It goes out under every tag a build gives it (the
flavour-profile tag and the one naming every component version, derived from
its labels as efa_image.building.build derives them), after `docker login` through the
aws CLI where the repository is an ECR URI. Every check runs before anything is
tagged or pushed; a push that fails says why in one line and leaves the local
image with the tags it had (a tag the push added is taken back).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field

from efa_image.building import fingerprint, images
from efa_image.building.tags import component_tags
from efa_image.errors import EfaImageError
from efa_image.runner import CommandError, log, run_command

# <account>.dkr.ecr[-fips].<region>.amazonaws.com[.cn]
ECR_REGISTRY = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z]{2}(?:-[a-z]+)+-\d+)"
    r"\.amazonaws\.com(?:\.cn)?$"
)
# A repository path component (the distribution spec's grammar).
PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
HOST = re.compile(r"^(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+|\[[0-9a-fA-F:]+\])(?::\d+)?$")
DIGEST = re.compile(r"digest: (sha256:[0-9a-f]{64})")
EXAMPLE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/efa-image"
COMPONENT_LABEL = "org.efa-image.component."


@dataclass(frozen=True)
class Repository:
    """Where images go: a registry host (with its port) and the repository's path."""

    registry: str
    name: str

    @property
    def ref(self) -> str:
        return f"{self.registry}/{self.name}"


@dataclass(frozen=True)
class Ecr:
    account: str
    region: str
    registry: str


@dataclass
class PushResult:
    image: str
    # REGISTRY/NAME:TAG -> the manifest digest the registry reported.
    digests: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def parse_repository(text: str) -> Repository:
    """HOST[:PORT]/NAME without a tag: the build's tags are the ones pushed."""
    host, sep, name = text.partition("/")
    if not sep or not HOST.match(host):
        raise EfaImageError(
            f"repository {text!r} names no registry: give HOST[:PORT]/NAME, e.g. {EXAMPLE}"
        )
    if "@" in name or ":" in name.rsplit("/", 1)[-1]:
        raise EfaImageError(
            f"repository {text!r} carries a tag or digest: give it without one "
            f"({text.split('@')[0].rsplit(':', 1)[0]}); the image's build tags are pushed"
        )
    if not all(PATH_COMPONENT.match(part) for part in name.split("/")):
        raise EfaImageError(
            f"repository name {name!r} is not valid: lowercase letters, digits and "
            "separators (. _ -) between them, components joined by /"
        )
    return Repository(host, name)


def ecr_of(repository: Repository) -> Ecr | None:
    """The ECR account and region of an ECR repository URI; None for other registries."""
    match = ECR_REGISTRY.match(repository.registry)
    if not match:
        return None
    return Ecr(match["account"], match["region"], repository.registry)


def login_commands(ecr: Ecr) -> tuple[list[str], list[str]]:
    """AWS's documented ECR login: the password from the aws CLI, piped to docker login."""
    return (
        ["aws", "ecr", "get-login-password", "--region", ecr.region],
        ["docker", "login", "--username", "AWS", "--password-stdin", ecr.registry],
    )


def require_aws_cli() -> None:
    if shutil.which("aws") is None:
        raise EfaImageError(
            "pushing to ECR logs in with `aws ecr get-login-password`, and the aws CLI is not "
            "installed: install it (`apt-get install awscli`, or AWS's installer) and configure "
            "credentials (`aws configure`, AWS_PROFILE or an instance role); nothing was pushed"
        )


def ecr_login(ecr: Ecr) -> None:
    password_argv, login_argv = login_commands(ecr)
    log.debug("$ %s", " ".join(password_argv))
    # Its own stdout only: warnings on stderr must never become part of the password.
    proc = subprocess.run(password_argv, capture_output=True, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        last = last_line(proc.stderr.decode(errors="replace")) or f"exit {proc.returncode}"
        raise EfaImageError(
            f"ECR login to {ecr.registry} failed: `{' '.join(password_argv)}`: {last}; configure "
            f"credentials for account {ecr.account} (`aws configure`, AWS_PROFILE or an instance "
            "role) with ecr:GetAuthorizationToken; nothing was pushed"
        )
    try:
        run_command(login_argv, input_data=proc.stdout)
    except CommandError as exc:
        raise EfaImageError(
            f"docker login to {ecr.registry} failed: {last_line(exc.output)}; nothing was pushed"
        ) from exc
    print(f"logged in to {ecr.registry} (ECR, {ecr.region})", flush=True)


@dataclass(frozen=True)
class VerifiedImage:
    image: str
    fingerprint: str
    tags: list[str]


def verified(ref: str) -> VerifiedImage:
    """The image, if a verified build of exactly this image ID is recorded; else refuse."""
    try:
        image = images.image_id(ref)
    except CommandError as exc:
        raise EfaImageError(f"no local image {ref}: build it with `efa-image build`") from exc
    digest = images.label(image, fingerprint.LABEL)
    if not digest:
        raise EfaImageError(
            f"{ref} was not built by `efa-image build` (no {fingerprint.LABEL} label); "
            "only verified builds are pushed: build it with `efa-image build`"
        )
    recorded = fingerprint.verified_image(digest)
    if recorded != image:
        raise EfaImageError(
            f"{ref} ({image[:19]}) did not pass verification here: no verified build of this "
            f"image is recorded for its fingerprint {digest[:16]} (under "
            f"{fingerprint.verified_dir()}); only verified images are pushed: run "
            "`efa-image build` (it verifies before tagging), then push what it tagged"
        )
    return VerifiedImage(image, digest, build_tags(image))


def build_tags(image: str) -> list[str]:
    """The tags `efa-image build` gave the image, from its flavour, profile and components."""
    labels = images.labels(image)
    versions = {
        key[len(COMPONENT_LABEL) :]: value
        for key, value in labels.items()
        if key.startswith(COMPONENT_LABEL)
    }
    flavor, profile = labels.get("org.efa-image.flavor"), labels.get("org.efa-image.profile")
    if not flavor or not profile:
        raise EfaImageError(f"image {image[:19]} lacks its flavour or profile label")
    return component_tags(flavor, profile, versions)


def last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else ""


# What docker push says -> why, in words, and what to do; the first match wins.
EXPLANATIONS: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (
        ("connection refused", "no such host", "i/o timeout", "network is unreachable"),
        "is unreachable",
        "check the address and that the registry is running",
    ),
    (
        ("server gave http response to https client",),
        "speaks plain HTTP",
        "docker pushes over plain HTTP only to 127.0.0.0/8 and its insecure-registries "
        "(/etc/docker/daemon.json): serve TLS, or list the registry there",
    ),
    (
        ("x509", "certificate"),
        "presented a TLS certificate docker does not trust",
        "install the registry's CA under /etc/docker/certs.d/<registry>/ca.crt",
    ),
    (
        ("no basic auth credentials", "unauthorized", "authentication required"),
        "refused the push: not logged in, or the credentials were rejected",
        "run `docker login <registry>` (ECR repositories log in by themselves)",
    ),
    (
        ("name unknown", "does not exist in the registry"),
        "has no such repository",
        "create it (ECR: `aws ecr create-repository --repository-name <name>`)",
    ),
    (
        ("denied",),
        "denied the push",
        "grant push rights on the repository (ECR: ecr:InitiateLayerUpload, ecr:PutImage, ...)",
    ),
    (
        ("405", "method not allowed", "unsupported"),
        "does not accept pushes (HTTP 405: read-only, or a pull-through mirror)",
        "push to a writable registry",
    ),
)


def explain(output: str, repository: Repository, target: str) -> str:
    """One line for a failed `docker push`: what the registry did and what to do."""
    text = output.lower()
    detail = last_line(output)
    for needles, why, fix in EXPLANATIONS:
        if any(needle in text for needle in needles):
            fix = fix.replace("<registry>", repository.registry)
            fix = fix.replace("<name>", repository.name)
            return (
                f"push of {target} failed: registry {repository.registry} {why} ({detail}); "
                f"{fix}; the local image keeps its tags"
            )
    return f"push of {target} failed: {detail}; the local image keeps its tags"


def destination(text: str) -> tuple[Repository, Ecr | None]:
    """The repository and its ECR account, checked before anything is built or pushed."""
    repository = parse_repository(text)
    ecr = ecr_of(repository)
    if ecr:
        require_aws_cli()
    return repository, ecr


def push(ref: str, repository_text: str) -> PushResult:
    """Push the verified image `ref` into the repository under each of its build tags."""
    start = time.monotonic()
    repository, ecr = destination(repository_text)
    image = verified(ref)
    if ecr:
        ecr_login(ecr)
    result = PushResult(image.image)
    for tag in image.tags:
        target = f"{repository.ref}:{tag}"
        existed = target in images.repo_tags(image.image)
        run_command(["docker", "tag", image.image, target])
        try:
            output = run_command(["docker", "push", target], stream=True).output
        except CommandError as exc:
            if not existed:
                untag(target, image.image)
            raise EfaImageError(explain(exc.output, repository, target)) from exc
        result.digests[target] = pushed_digest(output, repository, image.image)
        print(f"pushed {target} {result.digests[target]}", flush=True)
    result.seconds = round(time.monotonic() - start, 1)
    digests = sorted(set(result.digests.values()))
    print(
        f"pushed {image.image[:19]} to {repository.ref} in {result.seconds:g}s: "
        + ", ".join(f"{repository.ref}@{d}" for d in digests),
        flush=True,
    )
    return result


def untag(target: str, image: str) -> None:
    """Take back a tag this push added; never the image's last one (that would remove it)."""
    if set(images.repo_tags(image)) - {target}:
        run_command(["docker", "image", "rm", "--no-prune", target])


def pushed_digest(output: str, repository: Repository, image: str) -> str:
    """The manifest digest from docker push's last line, else from the image's RepoDigests."""
    found = DIGEST.findall(output)
    if found:
        return found[-1]
    for item in images.repo_digests(image):
        name, _, digest = item.partition("@")
        if name == repository.ref:
            return digest
    raise EfaImageError(f"docker push to {repository.ref} reported no digest")
