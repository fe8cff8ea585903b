"""Action `efa_image_build_cache`: the build cache on the controller.

The cache itself is efa_image.building.build_cache (the key, the directory) and
efa_image.building.registry_cache (the same entries in a registry).

Look up (no `store`): computes the key from the inputs and the target's probe
(common's _common_build_cache_probe_script: OS release and architecture, dpkg
list, baseline, `apt-cache policy` of the build packages), reads the directory,
then the registry, and returns {enabled, key, hit, source, path}: path is the
controller's archive on a hit, source `directory` or `registry`. A hit in the
directory that the registry lacks is published there too.
Store (`store: REMOTE_ARCHIVE`, `key: KEY`): fetches the archive from the target
into the directory, atomically, then publishes it to the registry.
A registry that cannot be reached, refuses, or serves a damaged entry costs one
warning line: the look-up is a miss, the store keeps the directory's entry.
Runs on the controller whatever connection the play uses (Packer and molecule
set ansible_connection for every host, so delegate_to cannot reach it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from efa_image.building import build_cache, registry_cache
from efa_image.errors import EfaImageError
from efa_image.registry.client import for_repository

display = Display()


class ActionModule(ActionBase):
    TRANSFERS_FILES = True
    _VALID_ARGS = frozenset(("component", "inputs", "probe", "cache", "store", "key"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = self._task.args
        component = str(args.get("component", ""))
        try:
            where = build_cache.locations(str(args.get("cache") or ""))
            if args.get("store"):
                remote, digest = str(args["store"]), str(args.get("key", ""))
                return result | self._store(where, component, remote, digest)
            probe = build_cache.probe_sections(str(args.get("probe", "")))
            digest = build_cache.key(
                component,
                args.get("inputs") or {},
                probe.get("os", ""),
                probe.get("installed", ""),
                baseline=probe.get("baseline"),
                policy=probe.get("policy", ""),
            )
        except (EfaImageError, OSError) as exc:
            raise AnsibleActionFail(str(exc)) from exc
        found = build_cache.lookup(where.directory, component, digest) if where.directory else None
        source = "directory" if found else ""
        if found and where.registry:
            self._publish(where, component, digest, found)
        elif where.directory and where.registry:
            found = self._fetch(where, component, digest)
            source = "registry" if found else ""
        return result | {
            "changed": False,
            "enabled": where.directory is not None,
            "key": digest,
            "hit": found is not None,
            "source": source,
            "path": str(found or ""),
            "directory": str(where.directory or ""),
            "registry": where.registry.ref if where.registry else "",
        }

    def _fetch(self, where: build_cache.Locations, component: str, digest: str) -> Path | None:
        assert where.directory and where.registry
        try:
            return registry_cache.fetch(
                for_repository(where.registry), component, digest, where.directory
            )
        except (EfaImageError, OSError, ValueError) as exc:
            display.warning(
                f"build cache: {component} compiled, not taken from the registry: {exc}"
            )
            return None

    def _publish(
        self, where: build_cache.Locations, component: str, digest: str, path: Path
    ) -> bool:
        assert where.registry
        try:
            return registry_cache.publish(for_repository(where.registry), component, digest, path)
        except (EfaImageError, OSError, ValueError) as exc:
            display.warning(f"build cache: {component} not published to the registry: {exc}")
            return False

    def _store(
        self, where: build_cache.Locations, component: str, remote: str, digest: str
    ) -> dict[str, Any]:
        if where.directory is None:
            return {"changed": False, "skipped_reason": "build cache off"}
        if len(digest) != 64:
            raise AnsibleActionFail("efa_image_build_cache: store needs the look-up's key")

        def fetch(local: Path) -> None:
            self._connection.fetch_file(remote, str(local))

        path = build_cache.store(where.directory, component, digest, fetch)
        published = self._publish(where, component, digest, path) if where.registry else False
        return {"changed": True, "path": str(path), "key": digest, "published": published}
