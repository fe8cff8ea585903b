"""Lookup `efa_image_artifact`: fetch lock entries on the controller, verified.

    query('efa_image_artifact', 'libfabric', lock=efa_image_artifacts,
          overlays=[...], mirror='', cache='', allow_unpinned=false)

returns, per name, {name, version, filename, sha256, kind, urls, sources, path}:
urls are the lock's (upstream) URLs, sources where this build takes the file from
(the mirror, when one is set), path the verified file in the controller's cache.
It uses the same code as `efa-image fetch` (the efa_image package in Ansible's
Python environment).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

DOCUMENTATION = r"""
name: efa_image_artifact
short_description: Fetch pinned artifacts into the controller's verified cache
description:
  - Downloads each named artifact of the efa-image lock (or takes it from a mirror)
    on the controller, verifies its sha256 and returns where it lies.
options:
  _terms:
    description: Names of lock entries.
    required: true
  lock:
    description: The lock (efa_image_artifacts).
    type: dict
    required: true
  overlays:
    description: Files holding efa_image_artifacts_overlay.
    type: list
    default: []
  mirror:
    description: Mirror directory or URL; when set, the only source.
    type: str
    default: ""
  cache:
    description: Cache directory; empty for the default.
    type: str
    default: ""
  allow_unpinned:
    description: Accept entries without a sha256.
    type: bool
    default: false
  fetch:
    description: Download and verify (true), or only resolve the entries (false, no path).
    type: bool
    default: true
"""


class LookupModule(LookupBase):
    def run(self, terms: list[str], variables: Any = None, **kwargs: Any) -> list[dict[str, Any]]:
        self.set_options(var_options=variables, direct=kwargs)
        try:
            from efa_image import artifacts, lock
        except ImportError as exc:
            raise AnsibleLookupError(
                "efa_image_artifact needs the efa_image package in Ansible's Python: "
                "run ansible from the project's virtualenv (make setup)"
            ) from exc
        try:
            parsed = lock.parse_entries(
                self.get_option("lock"),
                [Path(p) for p in self.get_option("overlays")],
                "group_vars",
            )
            store = artifacts.Store(
                cache_dir=Path(self.get_option("cache")) if self.get_option("cache") else None,
                mirror=self.get_option("mirror") or None,
                allow_unpinned=self.get_option("allow_unpinned"),
            )
            results = []
            for name in terms:
                if name not in parsed:
                    known = ", ".join(sorted(parsed))
                    raise lock.LockError(f"unknown component {name!r} (known: {known})")
                artifact = parsed[name]
                result = {
                    "name": artifact.name,
                    "version": artifact.version,
                    "filename": artifact.filename,
                    "sha256": artifact.sha256,
                    "kind": artifact.kind,
                    "urls": list(artifact.urls),
                    "sources": store.sources(artifact),
                }
                if self.get_option("fetch"):
                    path = store.get(artifact)
                    result["path"] = str(path)
                    result["sha256"] = artifact.sha256 or artifacts.sha256_of(path)
                results.append(result)
        except Exception as exc:  # efa_image errors carry the message users need
            raise AnsibleLookupError(str(exc)) from exc
        return results
