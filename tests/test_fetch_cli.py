"""`efa-image fetch`, `mirror create` and `lock update` end to end, on local sources."""

import hashlib
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from efa_image import cli
from efa_image.artifacts import lock
from httpfixture import serve

ROOT = Path(__file__).resolve().parents[1]
CONTENT = b"release archive stand-in\n" * 4096


def write_lock(tmp_path, url, sha256=""):
    path = tmp_path / "versions.yml"
    path.write_text(
        textwrap.dedent(f"""\
        ---
        # kept comment
        efa_image_artifacts:
          libfabric:
            version: "2.1.0"
            role: efa
            filename: libfabric-{{version}}.tar.bz2
            urls:
              - "{url}"
            sha256: "{sha256}"
        """)
    )
    return path


@pytest.fixture
def server():
    with serve() as state:
        yield state


def test_lock_update_writes_the_digest_kind_the_entry_uses(server, tmp_path, capsys):
    url = server.add("aws-ofi-nccl-1.21.1.tar.gz", CONTENT)
    path = write_lock(tmp_path, url)
    path.write_text(path.read_text().replace('sha256: ""', 'sha512: ""'))
    cache = str(tmp_path / "cache")
    assert cli.main(["lock", "update", "libfabric", "--lock", str(path), "--cache", cache]) == 0
    digest = hashlib.sha512(CONTENT).hexdigest()
    out = capsys.readouterr().out
    assert '-    sha512: ""' in out and f'+    sha512: "{digest}"' in out
    pinned = lock.load(path).get("libfabric")
    assert (pinned.digest_kind, pinned.digest, pinned.sha256) == ("sha512", digest, None)
    assert (tmp_path / "cache" / "sha512" / digest).read_bytes() == CONTENT
    assert cli.main(["lock", "update", "libfabric", "--lock", str(path), "--cache", cache]) == 0
    assert f"libfabric 2.1.0: sha512 {digest} already pinned" in capsys.readouterr().out
    assert cli.main(["lock", "list", "--lock", str(path), "--cache", cache]) == 0
    assert f"sha512:{digest[:12]}" in capsys.readouterr().out


def test_lock_update_pins_and_shows_the_diff(server, tmp_path, capsys):
    url = server.add("libfabric-2.1.0.tar.bz2", CONTENT)
    path = write_lock(tmp_path, url)
    assert (
        cli.main(
            ["lock", "update", "libfabric", "--lock", str(path), "--cache", str(tmp_path / "cache")]
        )
        == 0
    )
    digest = hashlib.sha256(CONTENT).hexdigest()
    out = capsys.readouterr().out
    assert '-    sha256: ""' in out and f'+    sha256: "{digest}"' in out
    assert lock.load(path).get("libfabric").sha256 == digest
    assert "# kept comment" in path.read_text()
    # The pinned file is in the cache: a fetch now needs no network.
    server.files.clear()
    assert (
        cli.main(
            [
                "fetch",
                "--lock",
                str(path),
                "--name",
                "libfabric",
                "--cache",
                str(tmp_path / "cache"),
            ]
        )
        == 0
    )
    assert (
        cli.main(
            [
                "lock",
                "update",
                "libfabric",
                "--lock",
                str(path),
                "--cache",
                str(tmp_path / "cache2"),
                "--mirror",
                str(tmp_path / "none"),
            ]
        )
        == 1
    )


def test_fetch_refuses_unpinned_before_downloading(server, tmp_path, capsys):
    url = server.add("a", CONTENT)
    path = write_lock(tmp_path, url)
    assert (
        cli.main(
            [
                "fetch",
                "--lock",
                str(path),
                "--name",
                "libfabric",
                "--cache",
                str(tmp_path / "cache"),
            ]
        )
        == 1
    )
    assert "no sha256 in the lock" in capsys.readouterr().err
    assert server.hits["GET /files/a"] == 0
    assert (
        cli.main(
            [
                "fetch",
                "--lock",
                str(path),
                "--name",
                "libfabric",
                "--allow-unpinned",
                "--cache",
                str(tmp_path / "cache"),
            ]
        )
        == 0
    )


def test_mirror_create_then_fetch_from_the_mirror_only(server, tmp_path):
    url = server.add("a", CONTENT)
    path = write_lock(tmp_path, url, hashlib.sha256(CONTENT).hexdigest())
    mirror = tmp_path / "mirror"
    assert (
        cli.main(
            [
                "mirror",
                "create",
                str(mirror),
                "--lock",
                str(path),
                "--cache",
                str(tmp_path / "cache1"),
            ]
        )
        == 0
    )
    assert (mirror / "libfabric/2.1.0/libfabric-2.1.0.tar.bz2").read_bytes() == CONTENT
    server.files.clear()
    assert (
        cli.main(
            [
                "fetch",
                "--lock",
                str(path),
                "--name",
                "libfabric",
                "--mirror",
                str(mirror),
                "--cache",
                str(tmp_path / "cache2"),
            ]
        )
        == 0
    )
    assert server.hits["GET /files/a"] == 1


def test_project_lock_preflight_reports_within_60s(tmp_path):
    """On a machine without GitHub or S3 every unreachable artifact is named, fast."""
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "efa_image", "fetch", "--check", "--cache", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert time.monotonic() - start < 60
    loaded = lock.load(ROOT / "playbooks/group_vars/all/versions.yml")
    for line in proc.stdout.splitlines():
        if line.strip().startswith("BAD "):
            name = line.split()[1]
            assert loaded.get(name)
            assert f"  {name} " in proc.stderr
    if proc.returncode != 0:
        assert "Remedy: build from a mirror" in proc.stderr
        # The nearest flavour and profile these sources can build, or that none can.
        assert "  make image FLAVOR=" in proc.stderr or "No other flavour" in proc.stderr
