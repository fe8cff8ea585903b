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

from efa_image.building import build_cache
from efa_image.registry.client import Client, RegistryError

CONFIG_TYPE = "application/vnd.efa-image.build-cache.config.v1+json"
LAYER_TYPE = "application/vnd.efa-image.build-cache.layer.v1.tar+gzip"


def tag(component: str, key: str) -> str:
    return f"{component}-{key}"


def config_document(component: str, key: str) -> bytes:
    document = {"format": build_cache.FORMAT, "component": component, "key": key}
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def publish(registry: Client, component: str, key: str, archive: Path) -> bool:
    """The entry into the registry unless its tag is there (True: pushed)."""
    if registry.manifest(tag(component, key)) is not None:
        return False
    config = config_document(component, key)
    registry.push_artifact(tag(component, key), CONFIG_TYPE, config, LAYER_TYPE, archive)
    return True


def fetch(registry: Client, component: str, key: str, directory: Path) -> Path | None:
    """The entry from the registry into `directory`; None when the registry has none.

    A manifest that is not this entry's, or a blob that does not match its digest,
    raises RegistryError: the caller compiles, saying so.
    """
    found = registry.artifact(tag(component, key), CONFIG_TYPE, "build cache entry")
    if found is None:
        return None
    config, layer = found
    named = json.loads(config)
    if named.get("component") != component or named.get("key") != key:
        raise RegistryError(
            f"{registry.repository.ref}:{tag(component, key)} names another entry "
            f"({named.get('component')} {str(named.get('key'))[:16]})"
        )
    return build_cache.store(
        directory, component, key, lambda partial: registry.fetch_blob(layer, partial)
    )
