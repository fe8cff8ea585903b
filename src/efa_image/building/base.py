"""Base images for builds and molecule: use one that is present, else make it locally.

No container registry is needed: Debian bases come from mmdebstrap and
`docker import`; derived bases (the CUDA toolkits) are a committed container on
top of one. The recipes are efa_image.building.base_recipes. Each image carries
a label with the fingerprint of its recipe (and of the lock files it unpacks),
so an unchanged recipe is reused and a changed one is rebuilt.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from efa_image.artifacts.artifact_store import Store
from efa_image.building.base_recipes import (
    APT_CLEAN_HOOK,
    APT_NO_LANGUAGES,
    DEBIAN_MIRROR,
    DPKG_EXCLUDES,
    DPKG_UNSAFE_IO,
    LABEL_PREFIX,
    PULL_TIMEOUT,
    RECIPES,
    REPOSITORY,
    Recipe,
    unpack_artifacts,
    unpack_tar,
)
from efa_image.errors import EfaImageError
from efa_image.filelock import exclusive
from efa_image.paths import default_cache_dir
from efa_image.runner import run_command


def image_labels(ref: str) -> dict[str, str] | None:
    """The image's labels, or None when no such image is present locally."""
    proc = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", ref],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        return None
    return json.loads(proc.stdout or "null") or {}


def image_id(ref: str) -> str | None:
    proc = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", ref],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def recipe_for(ref: str) -> Recipe | None:
    return next((r for r in RECIPES.values() if r.ref == ref), None)


def is_current(recipe: Recipe) -> bool:
    labels = image_labels(recipe.ref)
    return labels is not None and labels.get(f"{LABEL_PREFIX}.recipe") == recipe.fingerprint()


def ensure(name: str, rebuild: bool = False, store: Store | None = None) -> str:
    """Make sure the recipe's image is present and current; return what was done.

    `store` gives the files a recipe unpacks (a build's, with its --mirror); by
    default the artifact cache, then EFA_IMAGE_MIRROR or else the lock's URLs.
    """
    recipe = RECIPES[name]
    if recipe.parent:
        ensure(recipe.parent, store=store)
    # Two builds or test steps may ask for the same base at once: the second waits,
    # then finds it built.
    with exclusive(default_cache_dir() / "locks" / f"base-{name}.lock"):
        return _ensure_locked(recipe, rebuild, store)


def _ensure_locked(recipe: Recipe, rebuild: bool, store: Store | None = None) -> str:
    if not rebuild and is_current(recipe):
        return f"{recipe.ref}: up to date"
    previous = image_id(recipe.ref)
    if recipe.parent:
        build_derived(recipe, store)
    else:
        build_bootstrapped(recipe)
    if previous and previous != image_id(recipe.ref):
        # The outdated image is untagged now; it goes unless a container still uses it.
        subprocess.run(["docker", "image", "rm", previous], capture_output=True, check=False)
    return f"{recipe.ref}: built"


def ensure_ref(ref: str, store: Store | None = None) -> str:
    """For any configured base image: a recipe of ours, a local image, or a pull."""
    if recipe := recipe_for(ref):
        return ensure(recipe.name, store=store)
    if image_labels(ref) is not None:
        return f"{ref}: present"
    try:
        run_command(["docker", "pull", ref], stream=True, timeout=PULL_TIMEOUT)
    except EfaImageError as exc:
        known = ", ".join(r.ref for r in RECIPES.values())
        raise EfaImageError(
            f"base image {ref} is not present and could not be pulled ({exc}). "
            f"Load it (`docker load`), or use a locally bootstrapped one: {known}"
        ) from exc
    return f"{ref}: pulled"


def labels_for(recipe: Recipe, probed: dict[str, str]) -> dict[str, str]:
    labels = {
        f"{LABEL_PREFIX}.recipe": recipe.fingerprint(),
        f"{LABEL_PREFIX}.name": recipe.name,
        f"{LABEL_PREFIX}.description": recipe.description,
        f"{LABEL_PREFIX}.packages": " ".join(recipe.packages),
    }
    if recipe.parent:
        labels[f"{LABEL_PREFIX}.parent"] = RECIPES[recipe.parent].ref
    labels.update({f"{LABEL_PREFIX}.{key}": value for key, value in probed.items()})
    return labels


def change_args(recipe: Recipe, labels: dict[str, str]) -> list[str]:
    changes = [f"ENV {item}" for item in recipe.env]
    changes += [f"LABEL {key}={json.dumps(value)}" for key, value in sorted(labels.items())]
    if not recipe.parent:
        changes.append('CMD ["/bin/bash"]')
    return [arg for change in changes for arg in ("--change", change)]


def require_mmdebstrap() -> str:
    path = shutil.which("mmdebstrap")
    if path is None:
        raise EfaImageError(
            "mmdebstrap is not installed, so base images cannot be built: "
            "run `make setup` (or `apt-get install mmdebstrap`)"
        )
    return path


def prepare_rootfs(recipe: Recipe, rootfs: Path) -> None:
    """Apt sources, slim-image trimming, and nothing of the host left inside."""
    (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
    (rootfs / "etc/apt/sources.list.d/debian.sources").write_text(recipe.sources())
    (rootfs / "etc/dpkg/dpkg.cfg.d/excludes").write_text(DPKG_EXCLUDES)
    (rootfs / "etc/dpkg/dpkg.cfg.d/docker-apt-speedup").write_text(DPKG_UNSAFE_IO)
    (rootfs / "etc/apt/apt.conf.d/docker-clean").write_text(APT_CLEAN_HOOK)
    (rootfs / "etc/apt/apt.conf.d/docker-no-languages").write_text(APT_NO_LANGUAGES)
    for leftover in ("etc/resolv.conf", "etc/hostname"):
        (rootfs / leftover).unlink(missing_ok=True)
    for pattern in (
        "var/lib/apt/lists/*",
        "var/cache/apt/*.bin",
        "var/cache/apt/archives/*.deb",
        "var/log/*.log",
        "var/log/apt/*",
    ):
        for path in rootfs.glob(pattern):
            if path.is_file():
                path.unlink()


def unmount_below(directory: Path) -> None:
    """The bootstrap mounts /proc, /sys and /dev in the target; a killed run can leave them."""
    mounts = Path("/proc/mounts").read_text().splitlines()
    points = [line.split()[1] for line in mounts if len(line.split()) > 1]
    for point in sorted((p for p in points if p.startswith(f"{directory}/")), reverse=True):
        subprocess.run(["umount", "-l", point], check=False)


# mmdebstrap rather than debootstrap: the same minbase (the Essential packages
# and apt), installed by apt in one pass instead of package by package. In
# make test the two bases, built side by side, took 62 s and 69 s here against
# debootstrap's 122 s and 138 s. Its merged-usr hook merges /usr as debootstrap
# does (the symlinks and usr-is-merged): without it Debian 12 gets usrmerge, and
# perl with it (48 MB).
MERGED_USR_HOOK = "/usr/share/mmdebstrap/hooks/merged-usr"


def build_bootstrapped(recipe: Recipe) -> None:
    mmdebstrap = require_mmdebstrap()
    workdir = Path(tempfile.mkdtemp(prefix=f"efa-image-{recipe.name}-", dir="/var/tmp"))
    rootfs = workdir / "rootfs"
    try:
        run_command(
            [
                mmdebstrap,
                "--variant=minbase",
                f"--hook-dir={MERGED_USR_HOOK}",
                f"--include={','.join(recipe.packages)}",
                recipe.suite,
                str(rootfs),
                DEBIAN_MIRROR,
            ],
            stream=True,
        )
        prepare_rootfs(recipe, rootfs)
        tar = subprocess.Popen(
            ["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE
        )
        try:
            run_command(
                ["docker", "import", *change_args(recipe, labels_for(recipe, {})), "-", recipe.ref],
                stdin=tar.stdout.fileno() if tar.stdout else None,
            )
        finally:
            if tar.stdout:
                tar.stdout.close()
            if tar.wait() != 0:
                raise EfaImageError(f"packing {rootfs} with tar failed ({tar.returncode})")
    finally:
        unmount_below(workdir)
        shutil.rmtree(workdir, ignore_errors=True)


def derived_script(recipe: Recipe) -> str:
    """What runs in the parent's container: apt packages, ldconfig, the probe."""
    steps = ["set -eu"]
    if recipe.packages:
        steps += [
            "export DEBIAN_FRONTEND=noninteractive",
            "apt-get update -q",
            f"apt-get install -y -q --no-install-recommends {' '.join(recipe.packages)}",
            "rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin",
        ]
    if recipe.unpack and recipe.unpack.ld_conf:
        steps.append("ldconfig")
    if recipe.probe:
        # The image's ENV (PATH with the unpacked nvcc) holds only once committed.
        env = "".join(f"{shlex.quote(item)} " for item in recipe.env)
        steps += ["echo '--- probe ---'", f"env {env}{recipe.probe.command}"]
    return "; ".join(steps)


def copy_unpacked(recipe: Recipe, container: str, store: Store | None) -> None:
    """The recipe's lock files, verified by the store, unpacked into the created container."""
    if not recipe.unpack:
        return
    store = store or Store(mirror=os.environ.get("EFA_IMAGE_MIRROR") or None)
    archives = [store.get(artifact) for artifact in unpack_artifacts(recipe.unpack)]
    with tempfile.TemporaryDirectory(prefix=f"efa-image-{recipe.name}-", dir="/var/tmp") as tmp:
        tar = Path(tmp) / "unpacked.tar"
        count = unpack_tar(archives, recipe.unpack, tar)
        print(
            f"{recipe.name}: {count} files of {len(archives)} archives into {recipe.unpack.prefix}",
            flush=True,
        )
        with tar.open("rb") as stream:
            run_command(["docker", "cp", "-", f"{container}:/"], stdin=stream.fileno())


def build_derived(recipe: Recipe, store: Store | None = None) -> None:
    parent = RECIPES[recipe.parent or ""]
    container = f"efa-image-base-{recipe.name}-{uuid.uuid4().hex[:8]}"
    script = derived_script(recipe)
    try:
        run_command(["docker", "create", "--name", container, parent.ref, "bash", "-c", script])
        copy_unpacked(recipe, container, store)
        result = run_command(["docker", "start", "-a", container], stream=True)
        probed: dict[str, str] = {}
        if recipe.probe:
            probe_output = result.output.rpartition("--- probe ---")[2]
            match = re.search(recipe.probe.pattern, probe_output)
            if not match:
                raise EfaImageError(
                    f"{recipe.name}: `{recipe.probe.command}` did not print what "
                    f"{recipe.probe.pattern!r} expects"
                )
            probed[f"{recipe.probe.key}.version"] = match.group(1)
        run_command(
            [
                "docker",
                "commit",
                *change_args(recipe, labels_for(recipe, probed)),
                container,
                recipe.ref,
            ]
        )
        if recipe.probe:
            version_tag = recipe.probe.tag.format(version=probed[f"{recipe.probe.key}.version"])
            run_command(["docker", "tag", recipe.ref, f"{REPOSITORY}:{version_tag}"])
    finally:
        subprocess.run(["docker", "rm", "-f", container], capture_output=True, check=False)


def remove_all() -> list[str]:
    """`make clean`: every image of ours, whatever its tag."""
    proc = run_command(
        [
            "docker",
            "image",
            "ls",
            "--filter",
            f"label={LABEL_PREFIX}.recipe",
            "--format",
            "{{.Repository}}:{{.Tag}}",
        ]
    )
    refs = [ref for ref in proc.output.split() if ref and not ref.endswith(":<none>")]
    if refs:
        run_command(["docker", "image", "rm", "-f", *refs])
    return refs
