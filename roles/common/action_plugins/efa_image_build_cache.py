"""Action `efa_image_build_cache`: the build cache on the controller.

The cache itself is efa_image.building.build_cache.

Look up (no `store`): computes the key from the inputs and the target's probe
(common's _common_build_cache_probe_script: OS release and architecture, dpkg
list, baseline, `apt-cache policy` of the build packages), and returns
{enabled, key, hit, path}: path is the controller's archive on a hit.
Store (`store: REMOTE_ARCHIVE`, `key: KEY`): fetches the archive from the target
into the cache, atomically.
Runs on the controller whatever connection the play uses (Packer and molecule
set ansible_connection for every host, so delegate_to cannot reach it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from efa_image.building import build_cache


class ActionModule(ActionBase):
    TRANSFERS_FILES = True
    _VALID_ARGS = frozenset(("component", "inputs", "probe", "cache", "store", "key"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = self._task.args
        component = str(args.get("component", ""))
        directory = build_cache.cache_dir(str(args.get("cache") or ""))
        try:
            if args.get("store"):
                remote, digest = str(args["store"]), str(args.get("key", ""))
                return result | self._store(directory, component, remote, digest)
            probe = build_cache.probe_sections(str(args.get("probe", "")))
            digest = build_cache.key(
                component,
                args.get("inputs") or {},
                probe.get("os", ""),
                probe.get("installed", ""),
                baseline=probe.get("baseline"),
                policy=probe.get("policy", ""),
            )
        except (build_cache.BuildCacheError, OSError) as exc:
            raise AnsibleActionFail(str(exc)) from exc
        found = build_cache.lookup(directory, component, digest) if directory else None
        return result | {
            "changed": False,
            "enabled": directory is not None,
            "key": digest,
            "hit": found is not None,
            "path": str(found or ""),
            "directory": str(directory or ""),
        }

    def _store(
        self, directory: Path | None, component: str, remote: str, digest: str
    ) -> dict[str, Any]:
        if directory is None:
            return {"changed": False, "skipped_reason": "build cache off"}
        if len(digest) != 64:
            raise AnsibleActionFail("efa_image_build_cache: store needs the look-up's key")

        def fetch(local: Path) -> None:
            self._connection.fetch_file(remote, str(local))

        path = build_cache.store(directory, component, digest, fetch)
        return {"changed": True, "path": str(path), "key": digest}
