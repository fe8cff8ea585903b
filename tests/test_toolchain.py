import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from efa_image.errors import EfaImageError
from efa_image.setup import toolchain

DEBIAN = {"ID": "debian", "PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)"}
UBUNTU = {"ID": "ubuntu", "ID_LIKE": "debian", "PRETTY_NAME": "Ubuntu 24.04 LTS"}
FEDORA = {"ID": "fedora", "PRETTY_NAME": "Fedora Linux 41"}


def test_root_on_debian_and_ubuntu_passes():
    toolchain.check_platform(0, DEBIAN, has_apt=True)
    toolchain.check_platform(0, UBUNTU, has_apt=True)


def test_non_root_is_refused_with_the_fix():
    with pytest.raises(EfaImageError) as info:
        toolchain.check_platform(1000, DEBIAN, has_apt=True)
    message = str(info.value)
    assert "must run as root" in message
    assert "sudo make setup" in message
    assert "EFA_IMAGE_SKIP_SYSTEM=1" in message
    assert "mmdebstrap" in message


def test_non_debian_is_refused_with_what_to_install():
    with pytest.raises(EfaImageError) as info:
        toolchain.check_platform(0, FEDORA, has_apt=False)
    assert "Fedora Linux 41 is not" in str(info.value)
    assert "packer" in str(info.value) and "Docker engine" in str(info.value)


def test_debian_without_apt_is_refused():
    with pytest.raises(EfaImageError, match="apt-get"):
        toolchain.check_platform(0, DEBIAN, has_apt=False)


def test_read_os_release(tmp_path):
    path = tmp_path / "os-release"
    path.write_text('PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\nID=debian\n# comment\n')
    assert toolchain.read_os_release(path) == {
        "PRETTY_NAME": "Debian GNU/Linux 13 (trixie)",
        "ID": "debian",
    }
    assert toolchain.read_os_release(tmp_path / "missing") == {}


def test_fingerprint_follows_the_pins(tmp_path):
    (tmp_path / "pyproject.toml").write_text('dependencies = ["ansible-core==2.19.14"]\n')
    first = toolchain.requirements_fingerprint(tmp_path)
    assert first == toolchain.requirements_fingerprint(tmp_path)
    (tmp_path / "pyproject.toml").write_text('dependencies = ["ansible-core==2.19.15"]\n')
    assert toolchain.requirements_fingerprint(tmp_path) != first


def test_current_venv_is_not_reinstalled(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (venv / ".efa-image-installed").write_text(toolchain.requirements_fingerprint(tmp_path))
    assert toolchain.ensure_venv(tmp_path, venv) == "up to date"


def test_skip_system_checks_commands(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "packer" else f"/x/{name}")
    with pytest.raises(EfaImageError, match="missing commands: packer"):
        toolchain.check_commands()


SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture
def world_readable_package(root):
    """A copy of the package that an unprivileged user can import (the clone may sit in /root)."""
    directory = tempfile.mkdtemp(prefix="efa-image-test-")
    shutil.copytree(root / "src" / "efa_image", f"{directory}/efa_image")
    for path in [directory, *(str(p) for p in Path(directory).rglob("*"))]:
        os.chmod(path, 0o755)
    yield directory
    shutil.rmtree(directory)


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) not installed")
@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason="no system python3 for nobody")
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch to an unprivileged user")
def test_setup_as_unprivileged_user_fails_fast(world_readable_package):
    start = time.monotonic()
    proc = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            SYSTEM_PYTHON,
            "-m",
            "efa_image",
            "setup",
        ],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=60,
        env={
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "PYTHONPATH": world_readable_package,
            "EFA_IMAGE_ROOT": world_readable_package,
        },
    )
    assert proc.returncode == 1, proc.stderr
    assert time.monotonic() - start < 10
    errors = [line for line in proc.stderr.splitlines() if line.startswith("efa-image: error:")]
    assert len(errors) == 1 and "must run as root" in errors[0]


def setup_command(root: Path, *make_args: str) -> str:
    """The interpreter `make setup` builds the virtualenv with (a dry run: nothing runs)."""
    proc = subprocess.run(
        ["make", "-n", "-s", "-C", str(root), "setup", *make_args],
        capture_output=True,
        text=True,
        check=True,
        env={name: value for name, value in os.environ.items() if name != "PYTHON"},
    )
    line = next(line for line in proc.stdout.splitlines() if "-m efa_image setup" in line)
    return line.split("PYTHONPATH=src ", 1)[1].split(" -m efa_image", 1)[0]


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
@pytest.mark.skipif(not os.path.exists(SYSTEM_PYTHON), reason="no distribution python3 here")
def test_setup_builds_the_virtualenv_with_the_distributions_python(root):
    assert setup_command(root) == SYSTEM_PYTHON
    assert setup_command(root, "PYTHON=python3.11") == "python3.11"
