"""A local registry for the push tests: the CNCF distribution registry on loopback.

Debian packages it as `docker-registry` (`make setup` installs it). Each one
serves a fresh storage directory on 127.0.0.1 and a free port; docker pushes to
127.0.0.0/8 over plain HTTP without any daemon configuration. It can be started
read-only (the registry's maintenance mode) or with htpasswd auth, the two
ways a real registry refuses a push.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

REGISTRY = "docker-registry"
# Loopback is never proxied.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"


def get(address: str, path: str, accept: str = MANIFEST_V2) -> Any:
    """GET http://ADDRESS/v2/PATH from the registry's API (a response to read)."""
    request = urllib.request.Request(f"http://{address}/v2/{path}", headers={"Accept": accept})
    return OPENER.open(request, timeout=30)


def free_port() -> int:
    """A loopback port nothing listens on (the kernel's choice, released again)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def config(storage: Path, port: int, readonly: bool = False, htpasswd: Path | None = None) -> dict:
    data: dict = {
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {
            "filesystem": {"rootdirectory": str(storage)},
            "maintenance": {"readonly": {"enabled": readonly}},
        },
        "http": {"addr": f"127.0.0.1:{port}"},
    }
    if htpasswd is not None:
        # Without the file the registry creates one with a generated user: every push
        # without `docker login` is refused.
        data["auth"] = {"htpasswd": {"realm": "efa-image-test", "path": str(htpasswd)}}
    return data


@contextmanager
def local_registry(
    directory: Path, readonly: bool = False, auth: bool = False, timeout: float = 20.0
) -> Iterator[str]:
    """Start `docker-registry serve` in `directory`; yield its address, stop it after."""
    assert shutil.which(REGISTRY), f"{REGISTRY} is not installed: run `make setup`"
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    htpasswd = directory / "htpasswd" if auth else None
    conf = directory / "config.yml"
    conf.write_text(yaml.safe_dump(config(directory / "storage", port, readonly, htpasswd)))
    log = (directory / "registry.log").open("wb")
    proc = subprocess.Popen(
        [REGISTRY, "serve", str(conf)], stdout=log, stderr=subprocess.STDOUT, cwd=directory
    )
    address = f"127.0.0.1:{port}"
    try:
        wait_until_serving(address, proc, timeout, directory / "registry.log")
        yield address
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def wait_until_serving(address: str, proc: subprocess.Popen, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{REGISTRY} exited with {proc.returncode}: {log.read_text()}")
        try:
            with OPENER.open(f"http://{address}/v2/", timeout=2):
                return
        except urllib.error.HTTPError as exc:
            if exc.code == 401:  # serving, and asking for credentials
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{REGISTRY} did not serve {address} within {timeout:g}s")
