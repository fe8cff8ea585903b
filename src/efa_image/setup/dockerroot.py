"""Docker's data root on a journaled filesystem where the host's has no journal.

On ext4 without a journal (these machines' root filesystem: its
/sys/fs/ext4/<device>/journal_task reads "<none>"), the kernel skips, for every
new inode, each free inode of the block group that was deleted in the last
30 seconds, reading its inode block from the buffer cache to find out
(fs/ext4/ialloc.c, find_inode_bit and recently_deleted; journaled filesystems
do not check). Docker deletes all the time: each removed container, image or
build tree frees thousands of inodes, and the next container's files are
created among them. Measured here: 50,000 files written in 2.2 s took 16.2 s
right after 50,000 others were deleted (2.4 s on a journaled ext4 in a file);
a toolchain's apt install right after a container was removed took 8 to 11 s
of system time instead of 3.5 s, PyTorch's wheels 16 s instead of 8 s.

So when set-up starts dockerd itself and Docker's data root is on such a
filesystem and holds nothing yet, the data root becomes a journaled ext4 kept
in a sparse file (IMAGE) on a loop device: direct I/O, so pages are not cached
twice, and `discard`, so what Docker deletes gives its space back to the host.
A data root that holds anything is never hidden. EFA_IMAGE_DOCKER_ROOT=host
leaves the data root where it is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from efa_image.errors import EfaImageError
from efa_image.runner import run_command

IMAGE = Path(os.environ.get("EFA_IMAGE_DOCKER_ROOT_IMAGE", "/var/lib/efa-image/docker.ext4"))
DEFAULT_DATA_ROOT = Path("/var/lib/docker")
DAEMON_JSON = Path("/etc/docker/daemon.json")
LABEL = "efa-image-docker"
# A tenth of the host's free space stays free for everything else.
SHARE_OF_FREE_SPACE = 0.9
MIN_SIZE = 16 << 30
GIB = 1 << 30


@dataclass(frozen=True)
class Mount:
    point: Path
    device: str  # major:minor
    fstype: str
    source: str


def parse_mountinfo(text: str) -> list[Mount]:
    """/proc/self/mountinfo in mount order: a later mount on a point hides an earlier one."""
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        separator = fields.index("-")
        point = fields[4].replace("\\040", " ")
        mounts.append(Mount(Path(point), fields[2], fields[separator + 1], fields[separator + 2]))
    return mounts


def mount_of(path: Path, mounts: list[Mount]) -> Mount:
    """The mount that holds path: the longest mount point above it, the last one mounted."""
    best: Mount | None = None
    for mount in mounts:
        holds = path == mount.point or mount.point in path.parents
        if holds and (best is None or len(mount.point.parts) >= len(best.point.parts)):
            best = mount
    if best is None:
        raise EfaImageError(f"no mount holds {path}")
    return best


def lacks_journal(mount: Mount, sys_root: Path = Path("/sys")) -> bool:
    """ext4 mounted without a journal (the kernel names no journal thread)."""
    if mount.fstype != "ext4":
        return False
    name = (sys_root / "dev/block" / mount.device).resolve().name
    task = sys_root / "fs/ext4" / name / "journal_task"
    return task.is_file() and task.read_text().strip() == "<none>"


def data_root(daemon_json: Path = DAEMON_JSON) -> Path:
    """Docker's data root: daemon.json's data-root, else the default."""
    try:
        configured = json.loads(daemon_json.read_text()).get("data-root")
    except (FileNotFoundError, ValueError, AttributeError):
        configured = None
    return Path(configured) if configured else DEFAULT_DATA_ROOT


def loop_backing_file(device_path: str, sys_root: Path = Path("/sys")) -> Path | None:
    """The file behind /dev/loopN, or None for any other device."""
    name = Path(device_path).name
    backing = sys_root / "block" / name / "loop/backing_file"
    if not name.startswith("loop") or not backing.is_file():
        return None
    return Path(backing.read_text().strip())


def image_size(directory: Path) -> int:
    """Most of the host's free space, in whole GiB: the file is sparse and only grows with use."""
    stats = os.statvfs(directory)
    return int(stats.f_bavail * stats.f_frsize * SHARE_OF_FREE_SPACE) // GIB * GIB


def make_image(image: Path, min_size: int = MIN_SIZE) -> int:
    """A journaled ext4 in a sparse file, made under a temporary name so a failure leaves none."""
    image.parent.mkdir(parents=True, exist_ok=True)
    size = image_size(image.parent)
    if size < min_size:
        raise EfaImageError(f"{size // GIB} GiB free for {image}, less than {min_size // GIB} GiB")
    partial = image.with_name(image.name + ".partial")
    partial.unlink(missing_ok=True)
    with partial.open("wb") as handle:
        handle.truncate(size)
    try:
        run_command(["mkfs.ext4", "-q", "-L", LABEL, str(partial)])
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.rename(image)
    return size


def attach_and_mount(image: Path, target: Path) -> str:
    """Loop device with direct I/O, mounted with discard; the loop device is freed on failure."""
    loop = (
        run_command(["losetup", "--direct-io=on", "--find", "--show", str(image)])
        .output.strip()
        .splitlines()[-1]
    )
    try:
        target.mkdir(mode=0o710, parents=True, exist_ok=True)
        run_command(["mount", "-o", "discard", loop, str(target)])
    except BaseException:
        run_command(["losetup", "--detach", loop], check=False)
        raise
    return loop


def prepare(
    target: Path | None = None,
    image: Path = IMAGE,
    *,
    read_mounts: Callable[[], str] = lambda: Path("/proc/self/mountinfo").read_text(),
    journal_missing: Callable[[Mount], bool] = lacks_journal,
    min_size: int = MIN_SIZE,
) -> str:
    """Give Docker's data root a journal where it needs one; say what was done and why."""
    if os.environ.get("EFA_IMAGE_DOCKER_ROOT", "auto") == "host":
        return "data root left on the host filesystem (EFA_IMAGE_DOCKER_ROOT=host)"
    target = target or data_root()
    existing = target if target.exists() else next(p for p in target.parents if p.exists())
    mount = mount_of(existing.resolve(), parse_mountinfo(read_mounts()))
    if loop_backing_file(mount.source) == image.resolve() and mount.point == target.resolve():
        return f"data root {target}: journaled ext4 in {image}, mounted"
    if not journal_missing(mount):
        return f"data root {target}: {mount.fstype} on {mount.source}"
    if target.exists() and any(target.iterdir()):
        return (
            f"data root {target}: ext4 without a journal, left there as it holds data "
            f"(file creation is slow right after deletions there; see this module)"
        )
    made = ""
    if not image.exists():
        made = f", {make_image(image, min_size) // GIB} GiB sparse, made"
    loop = attach_and_mount(image, target)
    return (
        f"data root {target}: journaled ext4 in {image} on {loop}{made} "
        f"({mount.source} has no journal: file creation after deletions is slow there)"
    )


def release(target: Path) -> str:
    """Unmount the loop filesystem at target (with anything a killed dockerd left mounted
    below it) and free its loop device; nothing to do where target is no mount point."""
    mounts = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    if target.resolve() not in {mount.point for mount in mounts}:
        return f"{target}: not mounted"
    loop = mount_of(target.resolve(), mounts).source
    run_command(["umount", "--recursive", str(target)])
    if loop_backing_file(loop) is not None:
        run_command(["losetup", "--detach", loop], check=False)
    return f"{target}: unmounted ({loop})"
