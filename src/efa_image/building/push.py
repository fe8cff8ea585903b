"""`efa-image push` and `build --push`: a verified image into a registry, with its tags.

SageMaker pulls training images only from a registry (ECR). Only an image that
passed verification here is pushed: its fingerprint label must name a verified
build recorded under the artifact cache's `images/` (efa_image.building.fingerprint),
for that very image ID. It goes out under every tag a build gives it (the
flavour-profile tag and the one naming every component version, derived from
its labels as efa_image.building.build derives them) and `fingerprint-DIGEST`,
then the record that lets builds on other machines reuse it
(efa_image.building.published), after `docker login` through the aws CLI where
the repository is an ECR URI. Every check runs before anything is
tagged or pushed; a push that fails says why in one line and leaves the local
image with the tags it had (a tag the push added is taken back).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from efa_image.building import fingerprint, images, published
from efa_image.building.tags import component_tags
from efa_image.errors import EfaImageError
from efa_image.registry import credentials
from efa_image.registry.client import RegistryError
from efa_image.registry.reference import Ecr, Repository, ecr_of, parse_repository
from efa_image.runner import CommandError, last_line, run_command

DIGEST = re.compile(r"digest: (sha256:[0-9a-f]{64})")
COMPONENT_LABEL = "org.efa-image.component."


@dataclass
class PushResult:
    image: str
    # REGISTRY/NAME:TAG -> the manifest digest the registry reported.
    digests: dict[str, str] = field(default_factory=dict)
    # REGISTRY/NAME:TAG@DIGEST of the record that lets builds elsewhere reuse the image
    # (efa_image.building.published).
    record: str = ""
    seconds: float = 0.0


def ecr_login(ecr: Ecr, consequence: str = "nothing was pushed") -> None:
    """`docker login` with the aws CLI's password on its stdin, as AWS documents it."""
    try:
        password = credentials.ecr_password(ecr)
    except EfaImageError as exc:
        raise EfaImageError(f"{exc}; {consequence}") from None
    try:
        run_command(credentials.login_commands(ecr)[1], input_data=password + b"\n")
    except CommandError as exc:
        raise EfaImageError(
            f"docker login to {ecr.registry} failed: {last_line(exc.output)}; {consequence}"
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
        try:
            credentials.require_aws_cli()
        except EfaImageError as exc:
            raise EfaImageError(f"{exc}; nothing was pushed") from None
    return repository, ecr


def push(ref: str, repository_text: str) -> PushResult:
    """Push the verified image `ref` into the repository under each of its build tags."""
    start = time.monotonic()
    repository, ecr = destination(repository_text)
    image = verified(ref)
    if ecr:
        ecr_login(ecr)
    result = PushResult(image.image)
    for tag in [*image.tags, published.image_tag(image.fingerprint)]:
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
    digests = sorted(set(result.digests.values()))
    # Last: a build that finds the record finds its image pushed whole.
    record = published.Record(
        image.fingerprint, image.image, digests[-1], images.labels(image.image), image.tags
    )
    try:
        result.record = published.publish(repository, record)
    except RegistryError as exc:
        raise EfaImageError(
            f"pushed {image.image[:19]}, but not the record that lets builds reuse it: {exc}"
        ) from None
    print(f"pushed the verified-image record {result.record}", flush=True)
    result.seconds = round(time.monotonic() - start, 1)
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
