"""Base image recipes: what a base image holds, and the fingerprint that names it.

Debian bases come from mmdebstrap; derived ones add Debian packages or files of
lock entries (Unpack: CUDA 13's wheels into /usr/local/cuda) to a parent.
efa_image.building.base makes and inspects the images.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import zipfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from efa_image.artifacts.lock_model import Artifact
from efa_image.errors import EfaImageError

REPOSITORY = os.environ.get("EFA_IMAGE_BASE_REPO", "efa-image/base")
DEBIAN_MIRROR = os.environ.get("EFA_IMAGE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
SECURITY_MIRROR = os.environ.get(
    "EFA_IMAGE_DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security"
)
LABEL_PREFIX = "org.efa-image.base"
PULL_TIMEOUT = 300.0

# Same trimming as Debian's slim images: no manuals or translated docs.
DPKG_EXCLUDES = """\
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
"""

# dpkg without an fsync per unpacked file, as in Docker's official Ubuntu
# images (their docker-apt-speedup): a container's filesystem is thrown
# away when a build fails, so the syncs buy nothing. Measured here, the
# toolchain's apt install (build-essential, autotools, cmake, python3-dev) in a
# Debian 12 container: 28.8 s without it, 21.2 s with it (three runs each).
DPKG_UNSAFE_IO = "force-unsafe-io\n"

# No translated package descriptions in apt's lists, as in Docker's official
# Ubuntu images (their docker-no-languages): nothing reads them, and every
# `apt-get update` of a build fetched and indexed them. Measured here, an update
# from empty lists: 2.6 CPU-seconds instead of 3.4 on Debian 12, 2.1-2.4 instead
# of 2.9-3.1 on Debian 13; make test runs about 55 of them.
APT_NO_LANGUAGES = 'Acquire::Languages "none";\n'

_REMOVE_DEBS = '"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb || true"'
APT_CLEAN_HOOK = (
    f"DPkg::Post-Invoke {{ {_REMOVE_DEBS}; }};\nAPT::Update::Post-Invoke {{ {_REMOVE_DEBS}; }};\n"
)


@dataclass(frozen=True)
class Probe:
    """A command run in the built image whose output names what it contains."""

    key: str
    command: str
    pattern: str
    tag: str  # an extra tag naming the probed version, e.g. "debian13-cuda{version}"


@dataclass(frozen=True)
class Unpack:
    """Files of lock entries (zip archives: wheels) unpacked into a prefix of the image.

    Each archive's members under `member_root` go to `prefix`, modes kept; `links`
    are (path in prefix, target) symlinks made afterwards; `ld_conf` names the
    prefix's library directories for ld.so (/etc/ld.so.conf.d/<name>.conf).
    The files come through the artifact store, verified by the lock's digests.
    """

    artifacts: tuple[str, ...]
    prefix: str
    member_root: str
    links: tuple[tuple[str, str], ...] = ()
    ld_conf: tuple[str, ...] = ()


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    suite: str = ""
    packages: tuple[str, ...] = ()
    parent: str | None = None
    probe: Probe | None = None
    env: tuple[str, ...] = ()
    unpack: Unpack | None = None

    @property
    def ref(self) -> str:
        return f"{REPOSITORY}:{self.name}"

    def sources(self) -> str:
        """deb822 sources with contrib and non-free (NCCL and CUDA live there)."""
        components = "main contrib non-free non-free-firmware"
        return (
            f"Types: deb\nURIs: {DEBIAN_MIRROR}\nSuites: {self.suite} {self.suite}-updates\n"
            f"Components: {components}\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
            f"Types: deb\nURIs: {SECURITY_MIRROR}\nSuites: {self.suite}-security\n"
            f"Components: {components}\n"
            "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        )

    def fingerprint(self) -> str:
        """Changes whenever what goes into the image changes (mirrors excluded)."""
        material = asdict(self)
        if not self.unpack:
            del material["unpack"]  # recipes without one keep their fingerprint (and image)
        material["steps"] = [
            "mmdebstrap minbase merged-usr",
            DPKG_EXCLUDES,
            DPKG_UNSAFE_IO,
            APT_CLEAN_HOOK,
            APT_NO_LANGUAGES,
            "deb822:main contrib non-free",
        ]
        if self.parent:
            material["parent"] = RECIPES[self.parent].fingerprint()
        if self.unpack:
            material["unpacked"] = [
                [a.filename, a.digest_kind, a.digest] for a in unpack_artifacts(self.unpack)
            ]
        return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:16]


def unpack_artifacts(unpack: Unpack) -> list[Artifact]:
    """The lock's files an Unpack names (a wheel set's name: all of its files), as the
    build's lock has them (EFA_IMAGE_LOCK_OVERLAY applies)."""
    # Here, not at the top: `efa-image setup` imports this module before the
    # virtualenv (and the lock's YAML parser) exists.
    from efa_image.artifacts import lock

    return lock.load(None, lock.env_overlays()).select(unpack.artifacts)


def unpack_tar(archives: Iterable[Path], unpack: Unpack, out: Path) -> int:
    """A tar of the archives' members under member_root, placed at prefix (paths
    relative to /), plus the links and the ld.so file; returns the member count.

    Zip archives keep Unix modes in external_attr (wheels do: nvcc is 0755);
    nothing outside prefix can be written (members with .. are refused).
    """
    prefix = unpack.prefix.strip("/")
    count = 0
    with tarfile.open(out, "w") as tar:
        for archive in archives:
            with zipfile.ZipFile(archive) as wheel:
                for member in wheel.infolist():
                    name = member.filename
                    if member.is_dir() or not name.startswith(unpack.member_root):
                        continue
                    relative = name[len(unpack.member_root) :]
                    if ".." in relative.split("/"):
                        raise EfaImageError(f"{archive.name}: member {name!r} leaves the prefix")
                    info = tarfile.TarInfo(f"{prefix}/{relative}")
                    info.size = member.file_size
                    info.mode = (member.external_attr >> 16) & 0o7777 or 0o644
                    with wheel.open(member) as data:
                        tar.addfile(info, data)
                    count += 1
        for path, target in unpack.links:
            info = tarfile.TarInfo(f"{prefix}/{path}")
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(info)
        if unpack.ld_conf:
            text = "".join(f"{unpack.prefix}/{d}\n" for d in unpack.ld_conf).encode()
            info = tarfile.TarInfo(f"etc/ld.so.conf.d/{Path(prefix).name or 'unpacked'}.conf")
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
    return count


def debian(major: int, suite: str) -> Recipe:
    """A Debian minbase with what Ansible needs (python3 and the apt bindings)."""
    return Recipe(
        f"debian{major}",
        f"Debian {major} ({suite}) minbase with python3 and python3-apt",
        suite=suite,
        packages=("python3", "python3-apt", "ca-certificates"),
        env=("LANG=C.UTF-8",),
    )


RECIPES: dict[str, Recipe] = {
    recipe.name: recipe
    for recipe in (
        debian(12, "bookworm"),
        debian(13, "trixie"),
        Recipe(
            "debian13-cuda",
            "Debian 13 with the CUDA toolkit from non-free (nvcc, CUDA_HOME)",
            packages=("nvidia-cuda-toolkit",),
            parent="debian13",
            probe=Probe("cuda", "nvcc --version", r"release (\d+\.\d+)", "debian13-cuda{version}"),
            env=("CUDA_HOME=/usr/lib/nvidia-cuda-toolkit",),
        ),
        # CUDA 13 in NVIDIA's layout from NVIDIA's PyPI wheels (lock: cuda13_toolkit):
        # nvcc, cudart, headers, CCCL and nvml.h (libfabric's CUDA support): 115 MB of
        # downloads, 304 MB unpacked, instead of Debian's 5.3 GB toolkit (CUDA 12.4).
        # nvcc.profile links from lib64/ and the wheels have lib/;
        # `-cudart shared`, libfabric and aws-ofi-nccl need the unversioned libcudart.so.
        # nvcc uses the image's g++ (Debian 13: 14, which CUDA 13.2 supports).
        Recipe(
            "debian13-cuda13",
            "Debian 13 with CUDA 13 (nvcc, cudart, headers) from NVIDIA's PyPI wheels "
            "in /usr/local/cuda",
            parent="debian13",
            probe=Probe("cuda", "nvcc --version", r"release (\d+\.\d+)", "debian13-cuda{version}"),
            env=(
                "CUDA_HOME=/usr/local/cuda",
                "PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            ),
            unpack=Unpack(
                artifacts=("cuda13_toolkit",),
                prefix="/usr/local/cuda",
                member_root="nvidia/cu13/",
                links=(("lib64", "lib"), ("lib/libcudart.so", "libcudart.so.13")),
                ld_conf=("lib",),
            ),
        ),
    )
}
DEFAULT_RECIPES = ("debian12", "debian13")
