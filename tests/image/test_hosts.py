"""Existing hosts and AMIs: the playbooks over SSH as a non-root user with sudo, host mode.

Two containers stand in for fresh EC2 instances (tests/image/vmhost.py: sshd,
the default user `admin` with passwordless sudo, Python, apt's lists, nothing of
ours). On them, as a user would:

- the README's existing-host command (`ansible-playbook -i INVENTORY -u admin
  --become -e efa_image_profile=portable -e efa_mode=host playbooks/efa-reduced.yml`)
  provisions both, compiled components coming from the build cache over SSH;
  a second run changes nothing, and `--tags verify` re-verifies them without a change;
- the image's MPI self-check runs across both with `mpirun` started as `admin`
  in a non-interactive SSH shell, through the OFI MTL (tcp provider here);
- `packer build -only=null.host`, the host-mode provisioners the AMI builds run,
  provisions one of them again and verifies it last;
- bad input (sudo asking for a password, no Python, an unsupported release, an
  unreachable host) stops before any change with one line naming the fix.

make test runs this after image-tests@build stored libfabric and Open MPI in the
build cache (the Makefile's the steps after the first build), so nothing compiles here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import vmhost
from imagebuild import FLAVOR, PROFILE

from efa_image.paths import project_root
from efa_image.verification import multihost

ROOT = project_root()
VENV_PATH = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
RECAP = re.compile(
    r"^\s*(?:\S+: )?(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)"
)
CACHE_LINE = re.compile(r"build cache: (\w+) [0-9a-f]{16} (hit|miss|off)")
FIX_LINE = re.compile(r"^fatal: \[(\S+)\]: FAILED! => (\{.*\})$", re.MULTILINE)


@dataclass
class Run:
    rc: int
    output: str
    seconds: float

    def recaps(self) -> dict[str, dict[str, int]]:
        """PLAY RECAP counts per host (the last recap when the output holds several)."""
        counts: dict[str, dict[str, int]] = {}
        recap = self.output[self.output.rindex("PLAY RECAP") :]
        for line in recap.splitlines():
            if match := RECAP.match(line):
                host, *numbers = match.groups()
                keys = ("ok", "changed", "unreachable", "failed")
                counts[host] = dict(zip(keys, map(int, numbers), strict=True))
        return counts

    def changed_tasks(self) -> list[str]:
        """The names of the tasks that reported a change, in order."""
        chunks = self.output.split("TASK [")[1:]
        return [chunk.split("]", 1)[0] for chunk in chunks if "changed: [" in chunk]

    def fix_lines(self) -> list[str]:
        """The messages of the failed tasks: the line that names the fix."""
        return [json.loads(found.group(2))["msg"] for found in FIX_LINE.finditer(self.output)]


@dataclass
class Cluster:
    hosts: list[vmhost.Host]
    key: Path
    inventory: Path
    known_hosts: Path


def trust_host_keys(hosts: list[vmhost.Host], known_hosts: Path) -> None:
    """What a careful user does before the first run: record the hosts' keys (checking stays on)."""
    lines = []
    for host in hosts:
        scan = subprocess.run(
            ["ssh-keyscan", "-T", "5", host.address], capture_output=True, text=True, check=True
        )
        lines.append(scan.stdout)
    known_hosts.write_text("".join(lines))


def write_inventory(path: Path, hosts: list[vmhost.Host], port: int = 22) -> Path:
    lines = [f"{host.name} ansible_host={host.address} ansible_port={port}\n" for host in hosts]
    path.write_text("".join(lines))
    return path


def readme_command(cluster: Cluster, *extra: str, become: bool = True) -> Run:
    """The README's existing-host command, with the run's key and known_hosts file."""
    argv = ["ansible-playbook", "-i", str(cluster.inventory), "-u", vmhost.USER]
    argv += ["--private-key", str(cluster.key), *(["--become"] if become else [])]
    argv += ["--ssh-common-args", f"-o UserKnownHostsFile={cluster.known_hosts}"]
    argv += ["-e", f"efa_image_profile={PROFILE}", "-e", "efa_mode=host"]
    argv += [f"playbooks/{FLAVOR}.yml", *extra]
    start = time.monotonic()
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=os.environ | {"PATH": VENV_PATH},
        check=False,
    )
    return Run(proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start)


def on_host(host: vmhost.Host, cluster: Cluster, command: str) -> str:
    proc = vmhost.ssh(host, cluster.key, command)
    assert proc.returncode == 0, f"{host.name}: {command}: {proc.stdout}{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    directory = tmp_path_factory.mktemp("hosts")
    key = vmhost.make_key(directory)
    with vmhost.hosts(["h1", "h2"], key) as hosts:
        known_hosts = directory / "known_hosts"
        trust_host_keys(hosts, known_hosts)
        yield Cluster(hosts, key, write_inventory(directory / "inventory", hosts), known_hosts)


@pytest.fixture(scope="module")
def apt_lists_before(cluster) -> dict[str, str]:
    return {h.name: on_host(h, cluster, "ls /var/lib/apt/lists | sort") for h in cluster.hosts}


@pytest.fixture(scope="module")
def provisioned(cluster, apt_lists_before) -> Run:
    run = readme_command(cluster)
    print(f"existing-host run, 2 hosts: {run.seconds:.1f}s")
    assert run.rc == 0, run.output[-5000:]
    return run


def test_the_readme_command_provisions_both_hosts_over_ssh(cluster, provisioned):
    recaps = provisioned.recaps()
    assert set(recaps) == {"h1", "h2"}
    assert all(r["failed"] == 0 and r["unreachable"] == 0 for r in recaps.values()), recaps
    for host in ("h1", "h2"):
        assert f"{host}: ssh as {vmhost.USER}, tasks as root" in provisioned.output
    # Host mode: the cluster manages SSH, no build-time keys.
    assert "TASK [mpi_ssh" not in provisioned.output
    # Compiled components came through the build cache, copied over SSH on a hit.
    states = CACHE_LINE.findall(provisioned.output)
    print(f"build cache: {sorted(states)}")
    # NCCL's wheel goes through the same build path, never cached (test_image_build.py).
    compiled = {(name, state) for name, state in states if name != "nccl"}
    assert {name for name, _ in compiled} == {"libfabric", "openmpi"}, states
    assert {state for _, state in compiled} <= {"hit", "miss"}, states
    for host in cluster.hosts:
        on_host(host, cluster, "test -x /opt/efa-image/bin/mpi_allreduce_check")
        on_host(host, cluster, "/opt/amazon/efa/bin/fi_info -p tcp | grep -q 'provider: tcp'")


def test_host_clean_up_keeps_the_hosts_own_state(cluster, provisioned, apt_lists_before):
    """What the run added for its builds goes; the host's apt lists and caches stay."""
    for host in cluster.hosts:
        assert on_host(host, cluster, "ls /var/lib/apt/lists | sort") == apt_lists_before[host.name]
        on_host(host, cluster, "! command -v gcc && ! command -v make")
        on_host(host, cluster, "test ! -e /var/tmp/efa-image-build && test ! -e /var/lib/efa-image")
        # The image clean-up's size report is an image's, not a host's.
        on_host(host, cluster, "test ! -e /opt/efa-image/cleanup.json")


def test_a_second_run_changes_nothing(cluster, provisioned):
    run = readme_command(cluster)
    print(f"existing-host run again: {run.seconds:.1f}s")
    assert run.rc == 0, run.output[-5000:]
    recaps = run.recaps()
    assert {host: r["changed"] for host, r in recaps.items()} == {"h1": 0, "h2": 0}, recaps


def test_tags_verify_rechecks_the_hosts_without_changing_them(cluster, provisioned):
    run = readme_command(cluster, "--tags", "verify")
    print(f"--tags verify, 2 hosts: {run.seconds:.1f}s")
    assert run.rc == 0, run.output[-5000:]
    assert {host: r["changed"] for host, r in run.recaps().items()} == {"h1": 0, "h2": 0}
    assert "TASK [efa : Assert libfabric is the wanted one and complete]" in run.output
    assert "TASK [openmpi : Assert the OFI MTL is built and libmpi is complete]" in run.output
    assert "Run the build steps" not in run.output


def test_mpirun_across_the_hosts_as_the_user_in_a_non_interactive_shell(cluster, provisioned):
    """As a cluster does: one key for the user on every host, the hosts' keys known. The
    remote node gets no login shell: Open MPI passes its prefix to its daemon there, the
    dynamic linker finds libfabric through the roles' /etc/ld.so.conf.d entries."""
    names = [host.name for host in cluster.hosts]
    private = cluster.key.read_text()
    for host in cluster.hosts:
        install = (
            f"install -o {vmhost.USER} -g {vmhost.USER} -m 0600 /dev/stdin"
            f" /home/{vmhost.USER}/.ssh/id_ed25519"
        )
        subprocess.run(
            ["docker", "exec", "-i", host.container, "sh", "-c", install],
            input=private,
            text=True,
            check=True,
        )
        on_host(host, cluster, f"ssh-keyscan -T 5 {' '.join(names)} > ~/.ssh/known_hosts")
    # Nothing of ours in a non-interactive shell's environment: no PATH entry, no library path.
    environment = on_host(cluster.hosts[0], cluster, 'echo "$PATH|${LD_LIBRARY_PATH:-}"')
    assert "/opt/amazon" not in environment, environment
    # The cluster check users run: each host verified over SSH, then the MPI self-check
    # across both, mpirun started on h1 in a non-interactive shell.
    config = cluster.key.parent / "ssh_config"
    config.write_text(
        "".join(f"Host {h.name}\n  HostName {h.address}\n" for h in cluster.hosts)
        + f"Host *\n  User {vmhost.USER}\n  IdentityFile {cluster.key}\n"
        f"  UserKnownHostsFile {cluster.known_hosts}\n"
    )
    argv = [sys.executable, "-m", "efa_image", "verify", "--across", ",".join(names)]
    proc = subprocess.run([*argv, "--ssh-config", str(config)], capture_output=True, text=True)
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]
    for name in names:
        assert f"{name}:\nEFA verification, mode no-device" in proc.stdout
    assert proc.stdout.count("result: passed") == 2
    assert "rank 0 on h1: sum 3, want 3" in proc.stdout
    assert "rank 1 on h2: sum 3, want 3" in proc.stdout
    assert "OFI MTL selected by 2 ranks, providers tcp, tcp; mpirun exit 0" in proc.stdout
    # What libfabric needs at run time reaches every rank (the openmpi role's mca_base_env_list).
    probe = 'echo "$(hostname) $RDMAV_FORK_SAFE $FI_EFA_FORK_SAFE"'
    mpirun = f"{multihost.MPIRUN} -np 2 --host {','.join(f'{n}:1' for n in names)}"
    seen = on_host(cluster.hosts[0], cluster, f"{mpirun} sh -c '{probe}'")
    assert sorted(seen.split("\n")[:2]) == [f"{name} 1 1" for name in names], seen


def test_packer_host_mode_provisioners_run_over_ssh_as_the_user(cluster, provisioned, tmp_path):
    """The AMI builds' provisioners against h2 through Packer's null source: the same flags as
    the README's command (only the manifest's fingerprint and base change), verify last."""
    h2 = cluster.hosts[1]
    fingerprint = "0" * 63 + "1"
    argv = ["packer", "build", "-only=null.host"]
    argv += [f"-var=flavor={FLAVOR}", f"-var=profile={PROFILE}"]
    argv += [f"-var=host_address={h2.address}", f"-var=host_ssh_private_key_file={cluster.key}"]
    argv += [f"-var=fingerprint={fingerprint}", f"-var=manifest={tmp_path / 'manifest.json'}"]
    start = time.monotonic()
    proc = subprocess.run(
        [*argv, "."],
        capture_output=True,
        text=True,
        cwd=ROOT / "packer",
        env=os.environ | {"PATH": VENV_PATH},
        check=False,
    )
    output = ANSI.sub("", proc.stdout + proc.stderr)
    print(f"packer build -only=null.host: {time.monotonic() - start:.1f}s")
    assert proc.returncode == 0, output[-5000:]
    print("\n".join(line for line in output.splitlines() if "Executing Ansible" in line))
    assert "Not using Proxy adapter for Ansible run" in output
    executing = [line for line in output.splitlines() if "Executing Ansible: " in line]
    assert len(executing) == 2 and all("--become" in line for line in executing), executing
    assert "--tags verify" in executing[1]
    how = rf"default: ssh as {vmhost.USER}, tasks as root, \S+, Debian 12[0-9.]*"
    reached = re.search(how, output)
    assert reached, output[-3000:]
    print(reached.group(0))
    first, verify = output.split("Executing Ansible: ")[1:]
    changed = Run(0, first, 0).changed_tasks()
    assert changed == ["manifest : Write the image manifest"], changed
    assert Run(0, verify, 0).recaps()["default"]["changed"] == 0
    manifest = json.loads(on_host(h2, cluster, "cat /opt/efa-image/manifest.json"))
    assert manifest["fingerprint"] == fingerprint
    assert manifest["base_image"] == f"host {h2.address}" and manifest["profile"] == PROFILE


BAD_INPUTS = {
    "sudo-password": "asks admin for a password: give that user passwordless sudo (NOPASSWD",
    "no-python": "has no Python 3 (python3, /usr/bin/python3, /usr/libexec/platform-python not",
    "debian11": "runs Debian 11.11 on x86_64, which the roles do not support: use a host or base",
    "unreachable": "cannot be reached as admin (Failed to connect to the host via ssh",
    "no-become": "need root, but commands on bad run as admin: add --become (with passwordless",
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_stops_before_any_change_with_one_line(case, tmp_path):
    key = vmhost.make_key(tmp_path)
    variant = "" if case in ("unreachable", "no-become") else case
    with vmhost.hosts(["bad"], key, variant) as hosts:
        known_hosts = tmp_path / "known_hosts"
        trust_host_keys(hosts, known_hosts)
        # Nothing listens on that port: the address is right, the host unreachable.
        port = 2222 if case == "unreachable" else 22
        inventory = write_inventory(tmp_path / "inventory", hosts, port)
        cluster = Cluster(hosts, key, inventory, known_hosts)
        state = "ls -a /opt /var/tmp /var/lib; dpkg -l | md5sum"
        before = on_host(hosts[0], cluster, state)
        run = readme_command(cluster, become=case != "no-become")
        assert run.rc != 0, run.output[-3000:]
        lines = run.fix_lines()
        print(f"{case}: {lines[-1] if lines else run.output[-2000:]}")
        assert len(lines) >= 1 and BAD_INPUTS[case] in lines[-1], run.output[-3000:]
        assert run.recaps()["bad"]["changed"] == 0
        assert on_host(hosts[0], cluster, state) == before
