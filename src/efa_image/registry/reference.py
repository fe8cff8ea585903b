"""Repository references: `HOST[:PORT]/NAME`, the `oci://` form of the build cache, ECR's hosts."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from efa_image.errors import EfaImageError

# <account>.dkr.ecr[-fips].<region>.amazonaws.com[.cn]
ECR_REGISTRY = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z]{2}(?:-[a-z]+)+-\d+)"
    r"\.amazonaws\.com(?:\.cn)?$"
)
# A repository path component (the distribution spec's grammar).
PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
HOST = re.compile(r"^(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+|\[[0-9a-fA-F:]+\])(?::\d+)?$")
# A tag (the distribution spec's grammar).
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
EXAMPLE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/efa-image"
OCI_SCHEME = "oci://"


@dataclass(frozen=True)
class Repository:
    """A registry host (with its port) and a repository's path in it."""

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


def parse_repository(text: str) -> Repository:
    """HOST[:PORT]/NAME without a tag or digest."""
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


def parse_oci(text: str) -> Repository:
    """`oci://HOST[:PORT]/NAME`: a repository that holds OCI artifacts."""
    if not text.startswith(OCI_SCHEME):
        raise EfaImageError(f"{text!r} is not an oci://HOST[:PORT]/REPOSITORY reference")
    return parse_repository(text[len(OCI_SCHEME) :])


def ecr_of(repository: Repository) -> Ecr | None:
    """The ECR account and region of an ECR repository URI; None for other registries."""
    match = ECR_REGISTRY.match(repository.registry)
    if not match:
        return None
    return Ecr(match["account"], match["region"], repository.registry)


def is_loopback(registry: str) -> bool:
    """Docker's rule, kept by this project's client: plain HTTP only to loopback registries."""
    host = registry.rsplit(":", 1)[0] if not registry.endswith("]") else registry
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
