"""Lookup `efa_image_artifact`: fetch lock entries on the controller, verified.

    query('efa_image_artifact', 'libfabric', lock=efa_image_artifacts,
          overlays=[...], mirror='', cache='', allow_unpinned=false)

returns, per name, {name, version, filename, sha256, sha512, digest_kind, digest, kind,
wheelset, urls, sources, path, cache_path}: digest is the lock's pin, of the kind
digest_kind names (sha256, or sha512 for an entry pinned so; sha512 is null
otherwise); sha256 is the lock's, or once fetched the file's own for an entry pinned
by sha512 or not at all; urls are the lock's (upstream) URLs, sources where this
build takes the file from (the mirror, when one is set), path the verified file in
the controller's cache and cache_path the same file relative to the cache.
The name of a wheel set stands for all its files, one result each (wheelset: the set).
With by_name=true, lookup() returns them as one mapping, keyed by each result's name.
It uses the same code as `efa-image fetch` (the efa_image package in Ansible's
Python environment).

Relative overlay paths name files under the project's playbooks/ directory (as
a profile's lock_overlay in flavors.yml does), whatever the playbook's own
directory (molecule scenarios, Packer, ansible-playbook from anywhere). An
overlay named twice (the profile's, and again in EFA_IMAGE_LOCK_OVERLAY, as
`efa-image build` passes it) is applied once, at its last place: overlays
replace fields, so that is what applying every one in order gives.
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
    on the controller, verifies its sha256 (or the sha512 the lock pins it by) and
    returns where it lies.
options:
  _terms:
    description: Names of lock entries.
    required: true
  lock:
    description:
      - The lock (efa_image_artifacts).
      - Missing (null) stops the lookup, naming the file that defines it.
    type: dict
  overlays:
    description:
      - Files holding efa_image_artifacts_overlay, applied in order.
      - Relative paths are relative to the project's playbooks/ directory.
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
    description: Accept entries without a sha256 (or sha512).
    type: bool
    default: false
  fetch:
    description: Download and verify (true), or only resolve the entries (false, no path).
    type: bool
    default: true
  by_name:
    description: One mapping of name to result, for lookup(), instead of a list of results.
    type: bool
    default: false
"""

NO_LOCK = (
    "efa_image_artifacts is not defined: run from playbooks/ (group_vars/all/versions.yml)"
    " or load that file with vars_files."
)


# roles/artifact/lookup_plugins/ -> the checkout's playbooks/.
PLAYBOOKS = Path(__file__).resolve().parents[3] / "playbooks"


def playbooks_dir() -> Path:
    """The project's playbooks/: beside these roles, else the efa_image package's checkout."""
    if PLAYBOOKS.is_dir():
        return PLAYBOOKS
    from efa_image.paths import project_root

    return project_root() / "playbooks"


def overlay_paths(overlays: list[str]) -> list[Path]:
    """Absolute paths, each once (at its last place), relative ones under playbooks/."""
    base = playbooks_dir()
    resolved = [(base / Path(p).expanduser()).resolve() for p in overlays if str(p).strip()]
    return [path for i, path in enumerate(resolved) if path not in resolved[i + 1 :]]


class LookupModule(LookupBase):
    def run(self, terms: list[str], variables: Any = None, **kwargs: Any) -> list[dict[str, Any]]:
        self.set_options(var_options=variables, direct=kwargs)
        if not isinstance(self.get_option("lock"), dict):
            raise AnsibleLookupError(NO_LOCK)
        try:
            from efa_image.artifacts import artifact_store, lock
        except ImportError as exc:
            raise AnsibleLookupError(
                "efa_image_artifact needs the efa_image package in Ansible's Python: "
                "run ansible from the project's virtualenv (make setup)"
            ) from exc
        try:
            parsed = lock.parse_entries(
                self.get_option("lock"),
                overlay_paths(self.get_option("overlays")),
                "group_vars",
            )
            store = artifact_store.Store(
                cache_dir=Path(self.get_option("cache")) if self.get_option("cache") else None,
                mirror=self.get_option("mirror") or None,
                allow_unpinned=self.get_option("allow_unpinned"),
            )
            results = []
            for artifact in lock.expand(parsed, terms, "the artifact lock"):
                result = {
                    "name": artifact.name,
                    "version": artifact.version,
                    "filename": artifact.filename,
                    "sha256": artifact.sha256,
                    "sha512": artifact.sha512,
                    "digest_kind": artifact.digest_kind,
                    "digest": artifact.digest,
                    "kind": artifact.kind,
                    "wheelset": artifact.wheelset,
                    "urls": list(artifact.urls),
                    "sources": store.sources(artifact),
                }
                if self.get_option("fetch"):
                    path = store.get(artifact)
                    result["path"] = str(path)
                    # Where the file lies inside the cache, for a target that sees
                    # the cache mounted (artifact_cache_mount).
                    result["cache_path"] = str(path.relative_to(store.cache_dir))
                    result["sha256"] = artifact.sha256 or artifact_store.sha256_of(path)
                    result["digest"] = artifact.digest or artifact_store.digest_of(
                        path, artifact.digest_kind
                    )
                results.append(result)
        except Exception as exc:  # efa_image errors carry the message users need
            raise AnsibleLookupError(str(exc)) from exc
        if self.get_option("by_name"):
            return [{result["name"]: result for result in results}]
        return results
