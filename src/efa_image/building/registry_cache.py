"""The build cache in a registry: each entry an OCI artifact, tagged COMPONENT-KEY.

The same entries as the directory cache (efa_image.building.build_cache), under
the same keys, in a repository of the registry that holds the images (ECR, or
any registry that speaks the distribution spec), so a fresh machine takes what
another one compiled. An entry is an OCI image manifest whose config names the
component and key and whose one layer is the archive; its tag is
`COMPONENT-KEY` (at most 128 characters, the spec's limit).

Publishing uploads the archive, then the config, then the manifest under the
tag: a tag only ever names a whole entry, and two builders publishing the same
key at once leave the tag on one of their (equally valid) entries. Fetching
checks the config's component and key and every byte against its digest, and
writes into the directory cache atomically (build_cache.store), so what the
registry serves is used only when whole and right.
"""

from __future__ import annotations

import json
from pathlib import Path

from efa_image.artifacts.artifact_store import sha256_of
from efa_image.building import build_cache
from efa_image.registry import credentials
from efa_image.registry.client import OCI_MANIFEST, Client, RegistryError, sha256_digest
from efa_image.registry.reference import Repository

ARTIFACT_TYPE = "application/vnd.efa-image.build-cache.v1"
CONFIG_TYPE = "application/vnd.efa-image.build-cache.config.v1+json"
LAYER_TYPE = "application/vnd.efa-image.build-cache.layer.v1.tar+gzip"
TITLE = "org.opencontainers.image.title"


def tag(component: str, key: str) -> str:
    return f"{component}-{key}"


def client(repository: Repository) -> Client:
    return Client(repository, lambda: credentials.for_repository(repository))


def config_document(component: str, key: str) -> bytes:
    document = {"format": build_cache.FORMAT, "component": component, "key": key}
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def manifest_document(component: str, key: str, archive_digest: str, size: int) -> bytes:
    config = config_document(component, key)
    document = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": CONFIG_TYPE, "digest": sha256_digest(config), "size": len(config)},
        "layers": [
            {
                "mediaType": LAYER_TYPE,
                "digest": archive_digest,
                "size": size,
                "annotations": {TITLE: build_cache.entry(Path(), component, key).name},
            }
        ],
        "annotations": {"org.efa-image.build-cache.component": component},
    }
    return json.dumps(document, sort_keys=True, indent=1).encode()


def publish(registry: Client, component: str, key: str, archive: Path) -> bool:
    """The entry into the registry unless its tag is there (True: pushed)."""
    if registry.manifest(tag(component, key)) is not None:
        return False
    digest, size = f"sha256:{sha256_of(archive)}", archive.stat().st_size
    with archive.open("rb") as body:
        registry.push_blob(digest, size, body)
    config = config_document(component, key)
    registry.push_blob(sha256_digest(config), len(config), config)
    registry.push_manifest(tag(component, key), manifest_document(component, key, digest, size))
    return True


def fetch(registry: Client, component: str, key: str, directory: Path) -> Path | None:
    """The entry from the registry into `directory`; None when the registry has none.

    A manifest that is not this entry's, or a blob that does not match its digest,
    raises RegistryError: the caller compiles, saying so.
    """
    found = registry.manifest(tag(component, key))
    if found is None:
        return None
    manifest = found.data
    layers = manifest.get("layers") or []
    config = manifest.get("config") or {}
    if config.get("mediaType") != CONFIG_TYPE or len(layers) != 1:
        raise RegistryError(f"{registry.repository.ref}:{tag(component, key)} is no build entry")
    named = json.loads(registry.fetch_blob_bytes(str(config.get("digest"))))
    if named.get("component") != component or named.get("key") != key:
        raise RegistryError(
            f"{registry.repository.ref}:{tag(component, key)} names another entry "
            f"({named.get('component')} {str(named.get('key'))[:16]})"
        )
    layer = layers[0]
    return build_cache.store(
        directory, component, key, lambda partial: registry.fetch_blob(layer["digest"], partial)
    )
