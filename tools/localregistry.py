"""A local registry for the push tests and `make bench`: the CNCF distribution
registry on loopback.

Debian packages it as `docker-registry` (`make setup` installs it). Each one
serves a fresh storage directory on 127.0.0.1 and a free port; docker pushes to
127.0.0.0/8 over plain HTTP without any daemon configuration. It can be started
read-only (the registry's maintenance mode) or with htpasswd auth, the two
ways a real registry refuses a push. With its access log on, the bench counts
the bytes each build took from it (`bytes_sent`).
"""

from __future__ import annotations

import http.client
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

REGISTRY = "docker-registry"
# Loopback is never proxied.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
# What the registry writes, stdout and stderr, in its directory.
LOG = "registry.log"
# An access log line (Apache combined format, on the registry's stdout), as 2.8.2 writes it:
# 127.0.0.1 - - [04/Dec/2026:20:10:44 +0000] "GET /v2/test/blobs/sha256:c5f0... HTTP/1.1"
#   200 100000 "" "curl/7.88.1"
ACCESS_LINE = re.compile(
    r'^\S+ \S+ \S+ \[[^\]]*\] "(?P<method>[A-Z]+) [^"]*" \d{3} (?P<size>\d+|-) '
)


class RegistryError(RuntimeError):
    """The registry is not installed, exited, or did not serve in time."""


def get(address: str, path: str, accept: str = MANIFEST_V2) -> http.client.HTTPResponse:
    """GET http://ADDRESS/v2/PATH from the registry's API (a response to read)."""
    request = urllib.request.Request(f"http://{address}/v2/{path}", headers={"Accept": accept})
    return OPENER.open(request, timeout=30)


def free_port() -> int:
    """A loopback port nothing listens on (the kernel's choice, released again)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def config(
    storage: Path,
    port: int,
    readonly: bool = False,
    htpasswd: Path | None = None,
    access_log: bool = False,
) -> dict:
    data: dict = {
        "version": 0.1,
        # The registry logs every request unless told not to; only the bench reads them.
        "log": {"level": "warn", "accesslog": {"disabled": not access_log}},
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
    directory: Path,
    readonly: bool = False,
    auth: bool = False,
    timeout: float = 20.0,
    access_log: bool = False,
) -> Iterator[str]:
    """Start `docker-registry serve` in `directory`; yield its address, stop it after.

    Its output goes to `directory`/registry.log; access_log adds a line per request."""
    if not shutil.which(REGISTRY):
        raise RegistryError(f"{REGISTRY} is not installed: run `make setup`")
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    htpasswd = directory / "htpasswd" if auth else None
    conf = directory / "config.yml"
    conf.write_text(
        yaml.safe_dump(config(directory / "storage", port, readonly, htpasswd, access_log))
    )
    log = (directory / LOG).open("wb")
    proc = subprocess.Popen(
        [REGISTRY, "serve", str(conf)], stdout=log, stderr=subprocess.STDOUT, cwd=directory
    )
    address = f"127.0.0.1:{port}"
    try:
        wait_until_serving(address, proc, timeout, directory / LOG)
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
            raise RegistryError(f"{REGISTRY} exited with {proc.returncode}: {log.read_text()}")
        try:
            with OPENER.open(f"http://{address}/v2/", timeout=2):
                return
        except urllib.error.HTTPError as exc:
            if exc.code == 401:  # serving, and asking for credentials
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RegistryError(f"{REGISTRY} did not serve {address} within {timeout:g}s")


def log_offset(log: Path) -> int:
    """Where the registry's log ends now: a point to count its requests from."""
    return log.stat().st_size


def get_bytes(lines: Iterable[str]) -> int:
    """The bytes of the responses to GET requests among access log lines.

    HEAD lines are left out: the registry logs the size a GET would have sent."""
    total = 0
    for line in lines:
        match = ACCESS_LINE.match(line)
        if match and match["method"] == "GET" and match["size"] != "-":
            total += int(match["size"])
    return total


def bytes_sent(log: Path, start: int, end: int) -> int:
    """The bytes the registry sent in answer to GETs logged between two offsets of its log."""
    with log.open("rb") as file:
        file.seek(start)
        text = file.read(max(end - start, 0)).decode(errors="replace")
    return get_bytes(text.splitlines())
