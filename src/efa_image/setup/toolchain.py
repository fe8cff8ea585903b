"""`efa-image setup`: Debian packages, a Docker engine and the pinned virtualenv.

Standard library only: the Makefile runs this as `python3 -m efa_image setup`
before the virtualenv exists. Every step checks first and changes only what is
missing, so a second run takes seconds.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
import venv
from dataclasses import dataclass
from pathlib import Path

from efa_image.errors import EfaImageError
from efa_image.paths import project_root, venv_dir
from efa_image.runner import run_command
from efa_image.setup import engine
from efa_image.timing import StepTimer

MANUAL_INSTALL = (
    "a Docker engine (dockerd running), packer >= 1.6.6, mmdebstrap, "
    "python3 >= 3.11 with venv, git, make, xz-utils"
)


@dataclass(frozen=True)
class Requirement:
    """A Debian package, and the command whose presence means it is not needed."""

    package: str
    command: str | None = None

    def satisfied(self) -> bool:
        if self.command is not None:
            return shutil.which(self.command) is not None
        return dpkg_installed(self.package)


REQUIREMENTS = (
    # An engine from Docker CE, or one already answering, serves as well as docker.io.
    Requirement("docker.io", "dockerd"),
    Requirement("packer", "packer"),
    Requirement("mmdebstrap", "mmdebstrap"),
    Requirement("debian-archive-keyring"),
    Requirement("git", "git"),
    Requirement("make", "make"),
    Requirement("xz-utils", "xz"),
    # The CNCF distribution registry: the push tests serve one on loopback.
    Requirement("docker-registry", "docker-registry"),
    # Compose: the SageMaker SDK's local-container mode runs its jobs with it (image tests).
    Requirement("docker-compose", "docker-compose"),
    # A journaled filesystem for Docker's data root where the host's has none (dockerroot).
    Requirement("e2fsprogs", "mkfs.ext4"),
    Requirement("mount", "losetup"),
)


def dpkg_installed(package: str) -> bool:
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f=${db:Status-Status}", package],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.returncode == 0 and proc.stdout.strip() == "installed"


def read_os_release(path: Path = Path("/etc/os-release")) -> dict[str, str]:
    fields: dict[str, str] = {}
    try:
        text = path.read_text()
    except FileNotFoundError:
        return fields
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip('"')
    return fields


def check_platform(euid: int, os_release: dict[str, str], has_apt: bool) -> None:
    """Refuse early, naming the fix, where set-up could only get half done."""
    family = {os_release.get("ID", ""), *os_release.get("ID_LIKE", "").split()}
    if "debian" not in family or not has_apt:
        name = os_release.get("PRETTY_NAME", "this system")
        raise EfaImageError(
            f"automatic set-up needs Debian or a Debian derivative with apt-get; {name} is not. "
            f"Install by hand: {MANUAL_INSTALL}; then run `make setup EFA_IMAGE_SKIP_SYSTEM=1`"
        )
    if euid != 0:
        raise EfaImageError(
            "set-up installs Debian packages and starts dockerd, so it must run as root: "
            f"run `sudo make setup`, or install by hand: {MANUAL_INSTALL}; "
            "then run `make setup EFA_IMAGE_SKIP_SYSTEM=1`"
        )


def venv_needs_package(python: str = sys.executable) -> bool:
    """Debian's python3 can create virtualenvs only with python3-venv (ensurepip)."""
    proc = subprocess.run([python, "-c", "import ensurepip"], capture_output=True, check=False)
    return proc.returncode != 0


def missing_packages() -> list[str]:
    missing = [req.package for req in REQUIREMENTS if not req.satisfied()]
    if venv_needs_package():
        missing.append("python3-venv")
    return missing


def install_packages(packages: list[str]) -> None:
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    try:
        run_command(["apt-get", "update", "-q"], stream=True, env=env)
        run_command(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
            stream=True,
            env=env,
        )
    except EfaImageError as exc:
        raise EfaImageError(
            f"could not install {' '.join(packages)} with apt-get ({exc}); "
            f"fix the apt sources, or install by hand: {MANUAL_INSTALL}"
        ) from exc


def requirements_fingerprint(root: Path) -> str:
    """The virtualenv is current while pyproject.toml (the pins) and Python are unchanged."""
    digest = hashlib.sha256((root / "pyproject.toml").read_bytes())
    digest.update(sys.version.encode())
    return digest.hexdigest()


def setup_requirements(root: Path) -> list[str]:
    """What installs the virtualenv (uv), pinned in pyproject.toml's `setup` extra."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    return list(project["optional-dependencies"]["setup"])


def ensure_venv(root: Path, target: Path) -> str:
    stamp = target / ".efa-image-installed"
    wanted = requirements_fingerprint(root)
    python = target / "bin" / "python"
    if python.exists() and stamp.exists() and stamp.read_text().strip() == wanted:
        return "up to date"
    if not python.exists():
        # Built from the interpreter running set-up, never from inside another venv.
        venv.EnvBuilder(with_pip=True, clear=target.exists()).create(target)
    stamp.unlink(missing_ok=True)
    # uv installs the pinned tools: in back-to-back installs here from empty
    # caches it took 5 and 13 s where pip took 16 and 26 s to resolve, fetch and
    # unpack the same packages (their versions identical, `pip freeze`). It
    # leaves them uncompiled, as pip's --no-compile did: the `ansible` package
    # alone is tens of thousands of modules, and Python compiles what a command
    # imports on first use and keeps it (the virtualenv is writable; the Makefile
    # unexports PYTHONDONTWRITEBYTECODE). --native-tls: the system's CA
    # certificates, as pip uses.
    run_command([str(python), "-m", "pip", "install", "-q", *setup_requirements(root)], stream=True)
    uv = [str(python), "-m", "uv", "pip", "install", "-q", "--native-tls", "--python", str(python)]
    run_command([*uv, "--upgrade", "pip"], stream=True)
    run_command([*uv, "-e", f"{root}[test]"], stream=True)
    # Written last: an interrupted install is never mistaken for a finished one.
    stamp.write_text(wanted + "\n")
    return "installed"


def check_commands() -> None:
    missing = [c for c in ("docker", "packer", "mmdebstrap", "git", "make") if not shutil.which(c)]
    if missing:
        raise EfaImageError(
            f"missing commands: {', '.join(missing)}. Install by hand: {MANUAL_INSTALL}"
        )


def setup(skip_system: bool | None = None) -> None:
    if skip_system is None:
        skip_system = os.environ.get("EFA_IMAGE_SKIP_SYSTEM", "") not in ("", "0")
    root = project_root()
    timer = StepTimer("setup")
    with timer.step("platform"):
        if skip_system:
            check_commands()
        else:
            check_platform(os.geteuid(), read_os_release(), shutil.which("apt-get") is not None)
    if not skip_system:
        with timer.step("debian packages"):
            missing = missing_packages()
            if missing:
                print(f"installing: {' '.join(missing)}", flush=True)
                install_packages(missing)
            else:
                print("all present", flush=True)
    with timer.step("docker engine"):
        print(f"docker engine {engine.ensure_docker()}", flush=True)
    with timer.step("virtualenv"):
        print(f"{venv_dir()}: {ensure_venv(root, venv_dir())}", flush=True)
    print(timer.summary(), flush=True)
