"""locking.exclusive: a second process waits while the first holds the lock."""

import subprocess
import sys

from efa_image.filelock import exclusive

TRY_LOCK = (
    "import fcntl, sys\n"
    "handle = open(sys.argv[1], 'w')\n"
    "try:\n"
    "    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
    "except BlockingIOError:\n"
    "    sys.exit(1)\n"
)


def try_lock(path) -> int:
    return subprocess.run([sys.executable, "-c", TRY_LOCK, str(path)], check=False).returncode


def test_the_lock_is_held_for_the_block_only(tmp_path):
    lock = tmp_path / "locks" / "base-debian12.lock"
    with exclusive(lock):
        assert lock.exists(), "the lock file and its directory are created"
        assert try_lock(lock) == 1, "another process got the lock while it was held"
    assert try_lock(lock) == 0
