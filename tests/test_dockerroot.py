import os
import shutil
import subprocess
from pathlib import Path

import pytest

from efa_image.errors import EfaImageError
from efa_image.setup import dockerroot

# As on these machines: / without a journal, /var/lib/docker bound from it, then
# the journaled image mounted over that.
MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
46 27 254:0 /var/lib/docker /var/lib/docker rw,relatime shared:1 - ext4 /dev/vda rw,discard
45 46 7:0 / /var/lib/docker rw,relatime shared:2 - ext4 /dev/loop0 rw,discard
50 27 0:40 / /srv/with\\040space rw - xfs /dev/vdb rw
"""


def test_the_last_mount_on_the_longest_point_holds_a_path():
    mounts = dockerroot.parse_mountinfo(MOUNTINFO)
    assert dockerroot.mount_of(Path("/var/lib/docker/overlay2"), mounts).source == "/dev/loop0"
    assert dockerroot.mount_of(Path("/var/lib/dockerx"), mounts).source == "/dev/vda"
    assert dockerroot.mount_of(Path("/srv/with space/a"), mounts).fstype == "xfs"
    assert dockerroot.mount_of(Path("/"), mounts).device == "254:0"


@pytest.fixture
def sysfs(tmp_path):
    """A /sys with one block device, vda (254:0), whose ext4 names its journal thread as given."""
    root = tmp_path / "sys"
    (root / "devices/virtual/block/vda").mkdir(parents=True)
    (root / "dev/block").mkdir(parents=True)
    (root / "dev/block/254:0").symlink_to(root / "devices/virtual/block/vda")
    (root / "fs/ext4/vda").mkdir(parents=True)

    def with_journal_task(text: str) -> Path:
        (root / "fs/ext4/vda/journal_task").write_text(text + "\n")
        return root

    return with_journal_task


def test_ext4_naming_no_journal_thread_lacks_a_journal(sysfs):
    vda = dockerroot.Mount(Path("/"), "254:0", "ext4", "/dev/vda")
    assert dockerroot.lacks_journal(vda, sysfs("<none>"))
    assert not dockerroot.lacks_journal(vda, sysfs("812"))
    xfs = dockerroot.Mount(Path("/"), "254:0", "xfs", "/dev/vda")
    assert not dockerroot.lacks_journal(xfs, sysfs("<none>"))


def test_data_root_is_daemon_jsons_else_the_default(tmp_path):
    daemon_json = tmp_path / "daemon.json"
    assert dockerroot.data_root(daemon_json) == Path("/var/lib/docker")
    daemon_json.write_text('{"data-root": "/srv/docker"}')
    assert dockerroot.data_root(daemon_json) == Path("/srv/docker")
    daemon_json.write_text("not json")
    assert dockerroot.data_root(daemon_json) == Path("/var/lib/docker")


def mounts_of(path: Path, fstype: str = "ext4") -> str:
    return f"27 1 254:0 / {path} rw,relatime - {fstype} /dev/vda rw\n"


def test_turned_off_it_looks_at_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("EFA_IMAGE_DOCKER_ROOT", "host")

    def unread() -> str:
        raise AssertionError("mounts read although turned off")

    message = dockerroot.prepare(tmp_path / "docker", tmp_path / "img", read_mounts=unread)
    assert "EFA_IMAGE_DOCKER_ROOT=host" in message


def test_a_journaled_data_root_is_used_as_it_is(tmp_path, monkeypatch):
    monkeypatch.delenv("EFA_IMAGE_DOCKER_ROOT", raising=False)
    message = dockerroot.prepare(
        tmp_path / "docker",
        tmp_path / "img",
        read_mounts=lambda: mounts_of(tmp_path),
        journal_missing=lambda mount: False,
    )
    assert message == f"data root {tmp_path / 'docker'}: ext4 on /dev/vda"
    assert not (tmp_path / "img").exists()


def test_a_data_root_that_holds_data_is_never_hidden(tmp_path, monkeypatch):
    monkeypatch.delenv("EFA_IMAGE_DOCKER_ROOT", raising=False)
    target = tmp_path / "docker"
    (target / "overlay2").mkdir(parents=True)
    message = dockerroot.prepare(
        target,
        tmp_path / "img",
        read_mounts=lambda: mounts_of(tmp_path),
        journal_missing=lambda mount: True,
    )
    assert "without a journal, left there as it holds data" in message
    assert not (tmp_path / "img").exists()


def test_a_failed_mkfs_leaves_no_image(tmp_path, monkeypatch):
    # A stand-in mkfs.ext4 that fails (generic command mechanics).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mkfs.ext4").write_text("#!/bin/sh\necho 'mkfs: no space' >&2\nexit 1\n")
    (bin_dir / "mkfs.ext4").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    image = tmp_path / "img"
    with pytest.raises(EfaImageError, match="mkfs: no space"):
        dockerroot.make_image(image, min_size=1 << 20)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin"]


def test_too_little_free_space_is_refused(tmp_path):
    with pytest.raises(EfaImageError, match=r"GiB free for .*img, less than"):
        dockerroot.make_image(tmp_path / "img", min_size=1 << 62)
    assert not (tmp_path / "img").exists()


def can_loop_mount() -> str:
    if os.geteuid() != 0:
        return "needs root"
    missing = [c for c in ("losetup", "mkfs.ext4", "mount", "umount") if not shutil.which(c)]
    if missing:
        return f"needs {', '.join(missing)}"
    if not Path("/dev/loop-control").exists():
        return "no loop devices here (/dev/loop-control)"
    return ""


@pytest.mark.skipif(bool(can_loop_mount()), reason=can_loop_mount() or "runs")
def test_an_empty_data_root_gets_a_journaled_loop_filesystem(tmp_path, monkeypatch):
    """The real mechanics on a scratch directory: image, loop device, mount, and a second call."""
    monkeypatch.delenv("EFA_IMAGE_DOCKER_ROOT", raising=False)
    target, image = tmp_path / "docker", tmp_path / "state" / "docker.ext4"
    try:
        # The mechanics, not the size policy: a small floor keeps the test independent of how
        # full this machine's disk is (the policy has its own tests above).
        message = dockerroot.prepare(
            target, image, journal_missing=lambda mount: True, min_size=2 * dockerroot.GIB
        )
        assert f"journaled ext4 in {image} on /dev/loop" in message and "made" in message
        mount = dockerroot.mount_of(
            target, dockerroot.parse_mountinfo(Path("/proc/self/mountinfo").read_text())
        )
        assert mount.point == target and mount.fstype == "ext4"
        assert not dockerroot.lacks_journal(mount)
        loop = Path(mount.source).name
        assert Path(f"/sys/block/{loop}/loop/dio").read_text().strip() == "1"
        assert " discard" in subprocess.run(
            ["findmnt", "-no", "OPTIONS", str(target)], capture_output=True, text=True
        ).stdout.replace(",", " ")
        # Sparse: a few hundred MB of metadata, not the size the filesystem offers.
        assert image.stat().st_blocks * 512 < 1 << 30 < image.stat().st_size
        inode = image.stat().st_ino
        again = dockerroot.prepare(target, image, journal_missing=lambda mount: True)
        assert again == f"data root {target}: journaled ext4 in {image}, mounted"
        assert image.stat().st_ino == inode
    finally:
        released = dockerroot.release(target)
    assert released.startswith(f"{target}: unmounted (/dev/loop")
    assert dockerroot.release(target) == f"{target}: not mounted"
    assert not Path(f"/sys/block/{loop}/loop").exists()
