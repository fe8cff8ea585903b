"""Credentials for a registry, where `docker login` and the aws CLI keep them.

ECR repositories: the aws CLI's `ecr get-login-password` (AWS's documented
login; `efa-image push` pipes the same password into `docker login`). Other
registries: Docker's client configuration ($DOCKER_CONFIG/config.json, else
~/.docker/config.json): a credential helper for the host, the configured
credential store, or the `auths` entry `docker login` wrote. Secrets travel
through pipes and HTTP headers only: never an argument, never a log line.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from efa_image.errors import EfaImageError
from efa_image.registry.reference import Ecr, Repository, ecr_of


@dataclass(frozen=True)
class Credentials:
    username: str
    # Never shown: a repr or a traceback must not carry it.
    password: str = field(repr=False)


def login_commands(ecr: Ecr) -> tuple[list[str], list[str]]:
    """AWS's documented ECR login: the password from the aws CLI, piped to docker login."""
    return (
        ["aws", "ecr", "get-login-password", "--region", ecr.region],
        ["docker", "login", "--username", "AWS", "--password-stdin", ecr.registry],
    )


def require_aws_cli() -> None:
    if shutil.which("aws") is None:
        raise EfaImageError(
            "ECR repositories log in with `aws ecr get-login-password`, and the aws CLI is not "
            "installed: install it (`apt-get install awscli`, or AWS's installer) and configure "
            "credentials (`aws configure`, AWS_PROFILE or an instance role)"
        )


def ecr_password(ecr: Ecr) -> bytes:
    """The ECR password on the aws CLI's stdout; its stderr never becomes part of it."""
    require_aws_cli()
    argv = login_commands(ecr)[0]
    proc = subprocess.run(argv, capture_output=True, check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        last = lines[-1] if lines else f"exit {proc.returncode}"
        raise EfaImageError(
            f"ECR login to {ecr.registry} failed: `{' '.join(argv)}`: {last}; configure "
            f"credentials for account {ecr.account} (`aws configure`, AWS_PROFILE or an "
            "instance role) with ecr:GetAuthorizationToken"
        )
    return proc.stdout.strip()


def docker_config() -> Path:
    directory = os.environ.get("DOCKER_CONFIG") or str(Path.home() / ".docker")
    return Path(directory) / "config.json"


def from_helper(helper: str, registry: str) -> Credentials | None:
    """`docker-credential-HELPER get`, the registry on its stdin, the secret on its stdout."""
    program = shutil.which(f"docker-credential-{helper}")
    if program is None:
        return None
    proc = subprocess.run([program, "get"], input=registry.encode(), capture_output=True)
    if proc.returncode != 0:
        return None
    try:
        answer = json.loads(proc.stdout)
        return Credentials(str(answer["Username"]), str(answer["Secret"]))
    except (ValueError, KeyError, TypeError):
        return None


def from_docker_config(registry: str, path: Path | None = None) -> Credentials | None:
    try:
        config = json.loads((path or docker_config()).read_text())
    except (OSError, ValueError):
        return None
    helper = (config.get("credHelpers") or {}).get(registry) or config.get("credsStore")
    if helper:
        found = from_helper(str(helper), registry)
        if found:
            return found
    auths = config.get("auths") or {}
    for key in (registry, f"https://{registry}", f"http://{registry}"):
        encoded = (auths.get(key) or {}).get("auth")
        if not encoded:
            continue
        try:
            username, sep, password = base64.b64decode(encoded).decode().partition(":")
        except ValueError:  # not base64 or not UTF-8: as docker, no credentials from it
            continue
        if sep:
            return Credentials(username, password)
    return None


def for_repository(repository: Repository) -> Credentials | None:
    """What this machine would log in to the repository's registry with; None: anonymous."""
    ecr = ecr_of(repository)
    if ecr:
        return Credentials("AWS", ecr_password(ecr).decode())
    return from_docker_config(repository.registry)
