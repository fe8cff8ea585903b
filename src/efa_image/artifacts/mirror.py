"""Offline mirrors: every artifact of a lock in a directory anyone can serve.

Layout (documented in README.md):
    <mirror>/<name>/<version>/<filename>   the artifact, byte for byte
    <mirror>/SHA256SUMS                    `sha256sum -c` compatible, every file
    <mirror>/SHA512SUMS                    `sha512sum -c` compatible, the files the
                                           lock pins by sha512 (absent when none)
    <mirror>/index.json                    name, version, filename, sha256, role, path
                                           (and sha512, the pin, where the lock has one)
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from efa_image.artifacts.artifact_store import Store, digest_of, sha256_of
from efa_image.artifacts.lock import Artifact


def place(store: Store, artifact: Artifact, root: Path) -> str:
    """Put the verified artifact into the mirror; return 'linked', 'copied' or 'present'.

    A hard link where the mirror and the cache share a filesystem: make test's CI
    mirror is 3.1 GB, which was copied and then hashed again for the index. The
    store verified the file against the lock's digest, so nothing is hashed again.
    """
    source = store.get(artifact)
    target = root / artifact.mirror_path()
    if target.is_file() and (
        os.path.samefile(target, source)
        or digest_of(target, artifact.digest_kind) == artifact.digest
    ):
        return "present"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.partial")
    partial.unlink(missing_ok=True)
    try:
        os.link(source, partial)
        placed = "linked"
    except OSError:
        shutil.copyfile(source, partial)
        placed = "copied"
    os.chmod(partial, 0o644)
    os.replace(partial, target)
    return placed


def write_index(root: Path, artifacts: list[Artifact]) -> None:
    """Index every artifact the mirror holds, including those placed by earlier runs."""
    index_path = root / "index.json"
    entries = {}
    if index_path.is_file():
        entries = {e["path"]: e for e in json.loads(index_path.read_text())}
    for artifact in artifacts:
        entry = {
            "name": artifact.name,
            "version": artifact.version,
            "role": artifact.role,
            "filename": artifact.filename,
            # place() left the lock's verified file there; a file pinned by sha512
            # gets its sha256 too, so that SHA256SUMS covers every file.
            "sha256": artifact.sha256 or sha256_of(root / artifact.mirror_path()),
            "path": artifact.mirror_path(),
        }
        if artifact.sha512:
            entry["sha512"] = artifact.sha512
        # By path: one entry's variants (nccl_wheel's cu12 and, from a profile's
        # overlay, cu13 wheel of one version) lie side by side in one mirror.
        entries[artifact.mirror_path()] = entry
    ordered = sorted(entries.values(), key=lambda e: (e["name"], e["version"], e["path"]))
    index_path.write_text(json.dumps(ordered, indent=2) + "\n")
    sums = "".join(f"{entry['sha256']}  {entry['path']}\n" for entry in ordered)
    (root / "SHA256SUMS").write_text(sums)
    sums512 = "".join(f"{e['sha512']}  {e['path']}\n" for e in ordered if e.get("sha512"))
    if sums512:
        (root / "SHA512SUMS").write_text(sums512)
    else:
        (root / "SHA512SUMS").unlink(missing_ok=True)


def create(store: Store, artifacts: list[Artifact], root: Path) -> None:
    """Place every artifact into the mirror at root, then write its index."""
    for artifact in artifacts:
        print(f"  {artifact.mirror_path()}: {place(store, artifact, root)}", flush=True)
    write_index(root, artifacts)
