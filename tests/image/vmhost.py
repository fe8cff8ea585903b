"""Test fixture: Debian containers that stand in for fresh EC2 instances, reached over SSH.

What Ansible meets on a new instance of AWS's Debian AMI: sshd with host keys
made at first boot, a non-root default user (`admin`, as AWS's Debian AMIs name
it) whose authorized key is the key pair's (cloud-init writes it; here the
boot script does), passwordless sudo for that user, Python 3 and apt's lists,
and nothing of this project. Ansible reaches them by address over real SSH on a
Docker network of their own, never through `docker exec`.

What they do not emulate: a kernel of their own (no kernel modules: the EFA
installer's kmod path stays HARDWARE), the EC2 API and instance metadata,
cloud-init, systemd (sshd is the container's only service).

Variants for the bad-input tests change the boot, named as such: `sudo-password`
(sudo asks the user for a password), `no-python` (no Python 3, as on minimal
images), `debian11` (os-release and debian_version of Debian 11, a release the
roles do not support).
"""

from __future__ import annotations

import hashlib
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from imagebuild import ensure_base

BASE = "efa-image/base:debian12"
REPOSITORY = "efa-image-test/vm"
USER = "admin"
LABEL = "org.efa-image.test=vmhost"
RECIPE_LABEL = "org.efa-image.test.vm-recipe"

# Installed once into the image: what an AMI has that a minbase lacks.
SETUP = f"""\
set -eu
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends openssh-server sudo
useradd --create-home --shell /bin/bash {USER}
printf '%s ALL=(ALL) NOPASSWD:ALL\\n' {USER} > /etc/sudoers.d/90-cloud-init-users
chmod 0440 /etc/sudoers.d/90-cloud-init-users
rm -f /etc/ssh/ssh_host_*
mkdir -p /run/sshd
printf '%s' "$BOOT" > /usr/local/sbin/vm-boot
chmod 0755 /usr/local/sbin/vm-boot
"""

# Every start, as cloud-init's first boot: host keys, the key pair's public key
# for the default user; then the variant's change, then sshd in the foreground.
BOOT = f"""\
#!/bin/sh
set -eu
ssh-keygen -A >/dev/null
install -d -o {USER} -g {USER} -m 0700 /home/{USER}/.ssh
printf '%s\\n' "$AUTHORIZED_KEY" > /home/{USER}/.ssh/authorized_keys
chown {USER}: /home/{USER}/.ssh/authorized_keys
case "${{VARIANT:-}}" in
  sudo-password) printf '%s ALL=(ALL) ALL\\n' {USER} > /etc/sudoers.d/90-cloud-init-users ;;
  no-python) rm -f /usr/bin/python3 /usr/bin/python3.*[0-9] ;;
  debian11)
    printf '%s\\n' 'PRETTY_NAME="Debian GNU/Linux 11 (bullseye)"' 'NAME="Debian GNU/Linux"' \\
      'VERSION_ID="11"' 'VERSION="11 (bullseye)"' 'VERSION_CODENAME=bullseye' 'ID=debian' \\
      > /etc/os-release
    echo 11.11 > /etc/debian_version ;;
esac
exec /usr/sbin/sshd -D -e
"""


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    container: str


def docker(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, check=check)


def image() -> str:
    """The VM-like image, made from the Debian 12 base once per recipe."""
    base_id = docker("image", "inspect", "--format", "{{.Id}}", ensure_base(BASE)).stdout.strip()
    recipe = hashlib.sha256(f"{base_id}\n{SETUP}\n{BOOT}".encode()).hexdigest()[:16]
    ref = f"{REPOSITORY}:{recipe}"
    if docker("image", "inspect", ref, check=False).returncode == 0:
        return ref
    container = f"efa-image-vm-build-{uuid.uuid4().hex[:8]}"
    try:
        docker(
            "run", "--name", container, "--label", LABEL, "-e", f"BOOT={BOOT}", BASE,
            "sh", "-c", SETUP,
        )  # fmt: skip
        docker(
            "commit", "--change", f"LABEL {RECIPE_LABEL}={recipe}",
            "--change", 'CMD ["/usr/local/sbin/vm-boot"]', container, ref,
        )  # fmt: skip
    finally:
        docker("rm", "-f", container, check=False)
    return ref


def make_key(directory: Path) -> Path:
    """A key pair made for this run (a cluster's own key); returns the private key's path."""
    key = directory / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "efa-image-test", "-f", str(key)],
        check=True,
    )
    return key


@contextmanager
def hosts(names: list[str], key: Path, variant: str = "") -> Iterator[list[Host]]:
    """Containers of the VM-like image on a network of their own, answering SSH."""
    ref = image()
    network = f"efa-image-vm-{uuid.uuid4().hex[:8]}"
    containers = [f"{network}-{name}" for name in names]
    docker("network", "create", "--label", LABEL, network)
    try:
        started = []
        for name, container in zip(names, containers, strict=True):
            docker(
                "run", "-d", "--name", container, "--hostname", name, "--network", network,
                "--network-alias", name, "--label", LABEL,
                "-e", f"AUTHORIZED_KEY={key.with_suffix('.pub').read_text().strip()}",
                "-e", f"VARIANT={variant}", ref,
            )  # fmt: skip
            address = docker(
                "inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                container,
            ).stdout.strip()  # fmt: skip
            started.append(Host(name, address, container))
        for host in started:
            wait_for_ssh(host, key)
        yield started
    finally:
        docker("rm", "-f", *containers, check=False)
        docker("network", "rm", network, check=False)


def ssh_argv(host: Host, key: Path, user: str = USER) -> list[str]:
    """ssh to the host as the user, trusting its new host key as Packer's communicator does."""
    return [
        "ssh", "-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
        "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
        "-o", "LogLevel=ERROR", f"{user}@{host.address}",
    ]  # fmt: skip


def ssh(host: Host, key: Path, command: str) -> subprocess.CompletedProcess[str]:
    """A command in a non-interactive, non-login shell of the default user."""
    return subprocess.run(
        [*ssh_argv(host, key), command], capture_output=True, text=True, check=False
    )


def wait_for_ssh(host: Host, key: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while (proc := ssh(host, key, "true")).returncode != 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{host.name} ({host.address}) answers no SSH: {proc.stderr}")
        time.sleep(0.3)
