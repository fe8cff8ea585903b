"""make test's own Docker engine: an image store of its own, under the checkout's build directory.

A clean clone is not a clean machine: with the machine's engine, `make test`
would find the bases and images of every earlier run, and a test that uses one
without asking for the fixture that makes it would pass. So `make test` starts
this engine with an empty store each run (`start --fresh`), every step talks to
it (DOCKER_HOST) and it stops at the end; the machine's engine and its images
are left as they were. A step run alone (`make image-tests@build`) starts it
on the store the last run left.

Beside the machine's engine it has its own socket, exec root, pid file and
bridge, with addresses from POOL. It leaves iptables to this module
(`--iptables=false`): a second dockerd that manages iptables removes the first
one's DOCKER chains when it starts, which unpublishes the first one's ports.
The rules below give its containers what they need: the way out (masquerade)
and the way back. Its published ports work through docker-proxy, as with any
engine. One runs per machine; it records which checkout it serves.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from efa_image.errors import EfaImageError
from efa_image.runner import run_command
from efa_image.setup import dockerroot
from efa_image.setup.engine import docker_answers, pid_alive, start_dockerd

RUN_DIR = Path("/run/efa-image/test-engine")
SOCKET = RUN_DIR / "docker.sock"
HOST = f"unix://{SOCKET}"
PID_FILE = RUN_DIR / "docker.pid"
EXEC_ROOT = RUN_DIR / "exec"
OWNER = RUN_DIR / "state-dir"
BRIDGE = "efa-test0"
POOL = ipaddress.ip_network("10.213.0.0/16")
# The bridge takes the pool's first /24; networks the tests create take the next ones.
BRIDGE_ADDRESS = "10.213.0.1/24"
IPTABLES_RULES = (
    ("nat", "POSTROUTING", "-s", str(POOL), "!", "-d", str(POOL), "-j", "MASQUERADE"),
    ("filter", "FORWARD", "-s", str(POOL), "-j", "ACCEPT"),
    ("filter", "FORWARD", "-d", str(POOL), "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED",
     "-j", "ACCEPT"),
)  # fmt: skip
STOP_SECONDS = 60


def data_root(state: Path) -> Path:
    return state / "docker"


def image_file(state: Path) -> Path:
    return state / "docker.ext4"


def running_pid() -> int | None:
    try:
        pid = int(PID_FILE.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def serves(state: Path) -> Path | None:
    """The state directory of the engine that runs, or None when none runs."""
    if running_pid() is None:
        return None
    try:
        return Path(OWNER.read_text().strip())
    except FileNotFoundError:
        return Path("(unknown)")


def pool_routes(routes_json: str | None = None) -> list[tuple[str, str]]:
    """(destination, device) of this machine's routes (`ip -json route`) into POOL."""
    if routes_json is None:
        routes_json = run_command(["ip", "-json", "route"]).output
    found = []
    for route in json.loads(routes_json or "[]"):
        try:
            network = ipaddress.ip_network(route.get("dst", ""), strict=False)
        except ValueError:
            continue  # "default", and the like
        if network.overlaps(POOL):
            found.append((route["dst"], route.get("dev", "?")))
    return found


def ours(device: str) -> bool:
    """The bridge, and those of the networks the tests created (Docker names them br-ID)."""
    return device == BRIDGE or device.startswith("br-")


def check_pool_is_free(routes_json: str | None = None) -> None:
    if others := [f"{dst} dev {dev}" for dst, dev in pool_routes(routes_json) if not ours(dev)]:
        raise EfaImageError(
            f"the test engine's addresses ({POOL}) overlap this machine's routes: "
            + ", ".join(others)
        )


def ensure_bridge() -> None:
    if run_command(["ip", "link", "show", BRIDGE], check=False).returncode != 0:
        run_command(["ip", "link", "add", BRIDGE, "type", "bridge"])
        run_command(["ip", "address", "add", BRIDGE_ADDRESS, "dev", BRIDGE])
    run_command(["ip", "link", "set", BRIDGE, "up"])


def remove_bridges() -> None:
    """The bridge and those a stopped (or killed) engine left for its networks."""
    for device in sorted({dev for _, dev in pool_routes() if ours(dev)} | {BRIDGE}):
        run_command(["ip", "link", "delete", device], check=False)


def iptables(action: str, rule: tuple[str, ...]) -> bool:
    table, chain, *match = rule
    argv = ["iptables", "-w", "-t", table, action, chain, *match]
    return run_command(argv, check=False).returncode == 0


def add_iptables_rules() -> None:
    for rule in IPTABLES_RULES:
        if not iptables("-C", rule) and not iptables("-I" if rule[0] == "filter" else "-A", rule):
            raise EfaImageError(f"could not add the test engine's iptables rule {' '.join(rule)}")


def remove_iptables_rules() -> None:
    for rule in IPTABLES_RULES:
        while iptables("-C", rule):
            iptables("-D", rule)


def dockerd_argv(dockerd: str, state: Path) -> list[str]:
    return [
        dockerd,
        f"--host={HOST}",
        f"--data-root={data_root(state)}",
        f"--exec-root={EXEC_ROOT}",
        f"--pidfile={PID_FILE}",
        f"--bridge={BRIDGE}",
        f"--default-address-pool=base={POOL},size=24",
        "--iptables=false",
    ]


def start(state: Path, fresh: bool = False, wait_seconds: float = 60.0) -> str:
    """Make the test engine answer for state; with fresh, on an empty store."""
    state = state.resolve()
    owner = serves(state)
    if owner is not None and owner != state:
        raise EfaImageError(
            f"the test engine runs for {owner}; stop it first "
            f"(`make -C {owner.parent.parent} test-engine-stop`, or wait for its make test)"
        )
    if owner == state and not fresh and docker_answers(host=HOST):
        return f"test engine running ({HOST}, data root {data_root(state)})"
    if owner is not None:
        stop(state)
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise EfaImageError("dockerd is not installed: run `make setup` as root (docker.io)")
    if fresh:
        remove_store(state)
    check_pool_is_free()
    state.mkdir(parents=True, exist_ok=True)
    print(dockerroot.prepare(data_root(state), image_file(state)), flush=True)
    ensure_bridge()
    add_iptables_rules()
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    OWNER.write_text(f"{state}\n")
    start_dockerd(dockerd_argv(dockerd, state), state / "dockerd.log", wait_seconds, host=HOST)
    return f"test engine started ({HOST}, data root {data_root(state)}{', empty' if fresh else ''})"


def stop(state: Path) -> str:
    """Stop the test engine (its containers with it), unmount its store and take its
    bridge and rules away; the store stays for the next start."""
    state = state.resolve()
    pid = running_pid()
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
    released = dockerroot.release(data_root(state))
    remove_iptables_rules()
    remove_bridges()
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    was = "it was not running" if pid is None else f"pid {pid}"
    return f"test engine stopped ({was}); {released}"


def remove_store(state: Path) -> None:
    """The store's filesystem file and data root, for a run that starts from nothing."""
    dockerroot.release(data_root(state))
    image_file(state).unlink(missing_ok=True)
    if data_root(state).exists():
        # Overlay layers hold read-only directories that rmtree handles as root.
        subprocess.run(["rm", "-rf", "--one-file-system", str(data_root(state))], check=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m efa_image.setup.testengine", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--state", type=Path, required=True, help="where its store lives")
    sub = parser.add_subparsers(dest="action", required=True)
    start_cmd = sub.add_parser("start", help="make it answer (reusing its store)")
    start_cmd.add_argument("--fresh", action="store_true", help="on an empty store")
    sub.add_parser("stop", help="stop it; its store stays")
    sub.add_parser("remove", help="stop it and remove its store")
    args = parser.parse_args(argv)
    try:
        if args.action == "start":
            print(start(args.state, fresh=args.fresh), flush=True)
        elif args.action == "stop":
            print(stop(args.state))
        else:
            print(stop(args.state))
            remove_store(args.state.resolve())
            shutil.rmtree(args.state, ignore_errors=True)
            print(f"removed {args.state}")
    except EfaImageError as exc:
        raise SystemExit(f"test engine: {exc}") from exc


if __name__ == "__main__":
    main()
