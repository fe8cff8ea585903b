"""The registry HTTP API (the OCI distribution spec): blobs and manifests, through requests.

Why not a ready-made OCI client: the `oras` Python SDK (0.2.43) retries every
failed request five times with sleeps that add up to more than two minutes and
sets no timeouts, so an unreachable registry would stall each build-cache
look-up for minutes instead of costing one line; and it writes pulled blobs
without checking them against their digests. What a build cache and a
fingerprint record need is a handful of the spec's calls (blob HEAD, GET and a
monolithic upload, manifest GET and PUT, the token exchange), here with
timeouts, one-line errors and every byte checked against its digest, through
requests (the docker SDK's HTTP library, already installed).

Plain HTTP only to loopback registries (Docker's rule), TLS everywhere else.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urljoin

import requests

from efa_image.artifacts.artifact_store import sha256_of
from efa_image.errors import EfaImageError
from efa_image.registry import credentials
from efa_image.registry.credentials import Credentials
from efa_image.registry.reference import Repository, is_loopback

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
ACCEPT = ", ".join((OCI_MANIFEST, DOCKER_MANIFEST))
# Connect, read: an unreachable registry is a miss within seconds.
TIMEOUT = (5.0, 120.0)
CHUNK = 1 << 20
CHALLENGE = re.compile(r'(\w+)="([^"]*)"')
TITLE = "org.opencontainers.image.title"


class RegistryError(EfaImageError):
    """One line: what the registry did (or that it could not be reached)."""


class DigestMismatch(RegistryError):
    pass


@dataclass(frozen=True)
class Manifest:
    digest: str
    media_type: str
    body: bytes

    @property
    def data(self) -> dict[str, Any]:
        return json.loads(self.body)


def sha256_digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def why(response: requests.Response) -> str:
    """The registry's own error message, else the HTTP status."""
    try:
        errors = response.json().get("errors") or []
        message = "; ".join(str(e.get("message") or e.get("code")) for e in errors)
    except (ValueError, AttributeError):
        message = ""
    return f"HTTP {response.status_code}" + (f": {message}" if message else "")


class Client:
    """One repository of one registry; `received` counts the bytes of blobs read from it."""

    def __init__(
        self,
        repository: Repository,
        credentials: Callable[[], Credentials | None] = lambda: None,
        timeout: tuple[float, float] = TIMEOUT,
    ) -> None:
        self.repository = repository
        scheme = "http" if is_loopback(repository.registry) else "https"
        self.base = f"{scheme}://{repository.registry}/v2/{repository.name}/"
        self.session = requests.Session()
        # Loopback is never proxied; elsewhere the environment's proxy settings hold.
        self.session.trust_env = scheme == "https"
        self.credentials = credentials
        self.timeout = timeout
        self.authorization: str | None = None
        self.received = 0

    # Requests, with the distribution spec's authentication ---------------------------

    def request(self, method: str, url: str, actions: str = "pull", **kwargs: Any) -> Any:
        """A response; on 401 the registry's challenge is answered once and the call repeated."""
        response = self._send(method, url, **kwargs)
        if response.status_code == 401 and self._authenticate(response, actions):
            response.close()
            response = self._send(method, url, **kwargs)
        if response.status_code == 401:
            response.close()
            raise RegistryError(
                f"registry {self.repository.registry} refused access: not logged in, or the "
                f"credentials were rejected (`docker login {self.repository.registry}`; ECR "
                "repositories log in through the aws CLI)"
            )
        if response.status_code == 403:
            raise RegistryError(
                f"registry {self.repository.registry} denied {self.repository.name} "
                f"({why(response)}): grant the rights on the repository"
            )
        return response

    def _send(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        headers = dict(kwargs.pop("headers", {}))
        if self.authorization:
            headers["Authorization"] = self.authorization
        try:
            return self.session.request(
                method, url, headers=headers, timeout=self.timeout, **kwargs
            )
        except requests.ConnectionError as exc:
            raise RegistryError(
                f"registry {self.repository.registry} is unreachable ({reason(exc)})"
            ) from None
        except requests.Timeout:
            raise RegistryError(
                f"registry {self.repository.registry} did not answer within "
                f"{self.timeout[0]:g}s (connect) / {self.timeout[1]:g}s (read)"
            ) from None

    def _authenticate(self, response: requests.Response, actions: str) -> bool:
        """Basic with the credentials, or a bearer token from the challenge's realm."""
        challenge = response.headers.get("WWW-Authenticate", "")
        scheme = challenge.split(" ", 1)[0].lower()
        credentials = self.credentials()
        if scheme == "basic":
            if credentials is None:
                return False
            self.authorization = basic(credentials)
            return True
        if scheme != "bearer":
            return False
        params = dict(CHALLENGE.findall(challenge))
        query = {"service": params.get("service", "")}
        query["scope"] = f"repository:{self.repository.name}:{actions}"
        headers = {"Authorization": basic(credentials)} if credentials else {}
        try:
            answer = self.session.get(
                params.get("realm", ""), params=query, headers=headers, timeout=self.timeout
            )
        except requests.RequestException as exc:
            raise RegistryError(
                f"registry {self.repository.registry}: its token service is unreachable "
                f"({reason(exc)})"
            ) from None
        if answer.status_code != 200:
            return False
        token = answer.json().get("token") or answer.json().get("access_token")
        self.authorization = f"Bearer {token}" if token else None
        return bool(token)

    # Blobs -------------------------------------------------------------------------------

    def has_blob(self, digest: str, actions: str = "pull") -> bool:
        response = self.request("HEAD", f"{self.base}blobs/{digest}", actions)
        return response.status_code == 200

    def fetch_blob(self, digest: str, dest: Path) -> int:
        """The blob into `dest`, whole and matching its digest, or nothing and an error."""
        partial = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
        sha = hashlib.sha256()
        size = 0
        try:
            with self.request("GET", f"{self.base}blobs/{digest}", stream=True) as response:
                if response.status_code != 200:
                    raise RegistryError(
                        f"{self.repository.ref}: blob {digest[:19]} not served ({why(response)})"
                    )
                with partial.open("wb") as out:
                    for chunk in response.iter_content(CHUNK):
                        sha.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
            self.received += size
            if f"sha256:{sha.hexdigest()}" != digest:
                raise DigestMismatch(
                    f"{self.repository.ref}: blob {digest[:19]} arrived with sha256 "
                    f"{sha.hexdigest()[:12]} (damaged in the registry or on the way)"
                )
            partial.replace(dest)
        finally:
            partial.unlink(missing_ok=True)
        return size

    def fetch_blob_bytes(self, digest: str, limit: int = 1 << 20) -> bytes:
        with self.request("GET", f"{self.base}blobs/{digest}", stream=True) as response:
            if response.status_code != 200:
                raise RegistryError(
                    f"{self.repository.ref}: blob {digest[:19]} not served ({why(response)})"
                )
            body = response.raw.read(limit + 1, decode_content=True)
        self.received += len(body)
        if len(body) > limit or sha256_digest(body) != digest:
            raise DigestMismatch(
                f"{self.repository.ref}: blob {digest[:19]} does not match its digest"
            )
        return body

    def push_blob(self, digest: str, size: int, body: BinaryIO | bytes) -> bool:
        """Upload unless the registry has it (True: uploaded); one monolithic PUT."""
        if self.has_blob(digest, "pull,push"):
            return False
        start = self.request("POST", f"{self.base}blobs/uploads/", "pull,push")
        if start.status_code != 202 or "Location" not in start.headers:
            raise self.refused("an upload", start)
        location = urljoin(self.base, start.headers["Location"])
        separator = "&" if "?" in location else "?"
        done = self.request(
            "PUT",
            f"{location}{separator}digest={digest}",
            "pull,push",
            data=body,
            headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
        )
        if done.status_code != 201:
            raise self.refused(f"blob {digest[:19]}", done)
        return True

    # Manifests ---------------------------------------------------------------------------

    def manifest(self, reference: str) -> Manifest | None:
        """The manifest of a tag or digest; None when the repository has no such one."""
        response = self.request(
            "GET", f"{self.base}manifests/{reference}", headers={"Accept": ACCEPT}
        )
        if response.status_code == 404:
            return None
        if response.status_code != 200:
            raise RegistryError(f"{self.repository.ref}:{reference}: {why(response)}")
        body = response.content
        digest = sha256_digest(body)
        expected = reference if reference.startswith("sha256:") else None
        expected = expected or response.headers.get("Docker-Content-Digest")
        if expected and expected != digest:
            raise DigestMismatch(
                f"{self.repository.ref}:{reference}: manifest does not match its digest "
                f"{expected[:19]}"
            )
        media_type = response.headers.get("Content-Type", "").split(";")[0]
        return Manifest(digest, media_type, body)

    def push_manifest(self, reference: str, body: bytes, media_type: str = OCI_MANIFEST) -> str:
        response = self.request(
            "PUT",
            f"{self.base}manifests/{reference}",
            "pull,push",
            data=body,
            headers={"Content-Type": media_type},
        )
        if response.status_code != 201:
            raise self.refused(f"manifest {reference}", response)
        return sha256_digest(body)

    # Artifacts: a config naming what it is, and one layer --------------------------------

    def push_artifact(
        self, tag: str, config_type: str, config: bytes, layer_type: str, layer: Path | bytes
    ) -> str:
        """The layer, then the config, then the manifest under `tag`: a tag only ever names
        a whole artifact. The manifest's digest."""
        if isinstance(layer, bytes):
            digest, size = sha256_digest(layer), len(layer)
            self.push_blob(digest, size, layer)
        else:
            digest, size = f"sha256:{sha256_of(layer)}", layer.stat().st_size
            with layer.open("rb") as body:
                self.push_blob(digest, size, body)
        self.push_blob(sha256_digest(config), len(config), config)
        descriptor = {"mediaType": layer_type, "digest": digest, "size": size}
        if isinstance(layer, Path):
            descriptor["annotations"] = {TITLE: layer.name}
        manifest = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": config_type,
                "digest": sha256_digest(config),
                "size": len(config),
            },
            "layers": [descriptor],
        }
        return self.push_manifest(tag, json.dumps(manifest, sort_keys=True, indent=1).encode())

    def artifact(self, tag: str, config_type: str, what: str) -> tuple[bytes, str] | None:
        """The config and the layer's digest of the artifact under `tag`; None when there is
        none; an error when the tag names something else (`what` says what it should be)."""
        found = self.manifest(tag)
        if found is None:
            return None
        manifest = found.data
        layers = manifest.get("layers") or []
        config = manifest.get("config") or {}
        if config.get("mediaType") != config_type or len(layers) != 1:
            raise RegistryError(f"{self.repository.ref}:{tag[:28]}... is no {what}")
        return self.fetch_blob_bytes(str(config.get("digest"))), str(layers[0].get("digest"))

    def refused(self, what: str, response: requests.Response) -> RegistryError:
        if response.status_code == 405:
            return RegistryError(
                f"registry {self.repository.registry} does not accept pushes ({why(response)}: "
                "read-only, or a pull-through mirror)"
            )
        return RegistryError(f"{self.repository.ref} refused {what} ({why(response)})")


def for_repository(repository: Repository) -> Client:
    """A client with the credentials this machine would log in to the registry with."""
    return Client(repository, lambda: credentials.for_repository(repository))


def basic(credentials: Credentials) -> str:
    token = base64.b64encode(f"{credentials.username}:{credentials.password}".encode())
    return f"Basic {token.decode()}"


def reason(exc: Exception) -> str:
    """The innermost cause of a connection error, e.g. `Connection refused`."""
    text = str(exc)
    for needle in (
        "Connection refused",
        "Name or service not known",
        "No route to host",
        "timed out",
    ):
        if needle in text:
            return needle.lower()
    return text.splitlines()[0][:120] if text else type(exc).__name__
