import hashlib
import socket
import threading
import time

import pytest

from efa_image.artifacts import artifact_store, mirror, preflight
from efa_image.artifacts.lock import Artifact
from httpfixture import serve

CONTENT = b"libfabric release archive stand-in\n" * 1000


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make(url: str | list[str], content: bytes = CONTENT, **fields) -> Artifact:
    urls = (url,) if isinstance(url, str) else tuple(url)
    values = {
        "name": "libfabric",
        "version": "2.1.0",
        "role": "efa",
        "filename": "libfabric-2.1.0.tar.bz2",
        "urls": urls,
        "sha256": sha(content),
        "origin": "versions.yml: efa_image_artifacts.libfabric",
    }
    values.update(fields)
    return Artifact(**values)


@pytest.fixture
def server():
    with serve() as state:
        yield state


@pytest.fixture
def store(tmp_path):
    return artifact_store.Store(cache_dir=tmp_path / "cache", timeout=2)


def cache_files(store, sub):
    root = store.cache_dir / sub
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def test_download_enters_the_cache_by_content(server, store):
    artifact = make(server.add("a.tar.bz2", CONTENT))
    path = store.get(artifact)
    assert path == store.cache_dir / "sha256" / artifact.sha256
    assert path.read_bytes() == CONTENT
    assert store.get(artifact) == path
    assert server.hits["GET /files/a.tar.bz2"] == 1
    assert cache_files(store, "tmp") == []


def test_tampered_cache_file_stops_and_is_moved_aside(server, store):
    artifact = make(server.add("a.tar.bz2", CONTENT))
    path = store.get(artifact)
    path.write_bytes(CONTENT + b"tampered")
    with pytest.raises(artifact_store.ChecksumMismatch) as info:
        store.get(artifact)
    message = str(info.value)
    assert "libfabric 2.1.0 (libfabric-2.1.0.tar.bz2)" in message
    assert f"the cache ({path})" in message
    assert sha(CONTENT + b"tampered") in message and artifact.sha256 in message
    assert not path.exists()
    assert len(cache_files(store, "quarantine")) == 1


def test_tampered_mirror_file_is_never_used(tmp_path):
    artifact = make("https://unreachable.invalid/a")
    root = tmp_path / "mirror"
    (root / "libfabric/2.1.0").mkdir(parents=True)
    (root / artifact.mirror_path()).write_bytes(b"not the release")
    store = artifact_store.Store(cache_dir=tmp_path / "cache", mirror=str(root))
    with pytest.raises(artifact_store.ChecksumMismatch) as info:
        store.get(artifact)
    assert (root / artifact.mirror_path()).as_uri() in str(info.value)
    assert sha(b"not the release") in str(info.value)
    assert cache_files(store, "sha256") == []
    assert len(cache_files(store, "quarantine")) == 1


def test_wrong_upstream_file_is_quarantined_not_cached(server, store):
    artifact = make(server.add("a.tar.bz2", b"something else"))
    with pytest.raises(artifact_store.ChecksumMismatch, match=r"/files/a.tar.bz2: sha256 "):
        store.get(artifact)
    assert cache_files(store, "sha256") == []


@pytest.mark.parametrize(
    ("path", "message"),
    [("/truncated", "truncated: got 100 of 1000 bytes"), ("/missing", "HTTP 404")],
)
def test_broken_downloads_leave_nothing_in_the_cache(server, store, path, message):
    artifact = make(server.url + path)
    with pytest.raises(artifact_store.ArtifactError, match=message):
        store.get(artifact)
    assert cache_files(store, "sha256") == [] and cache_files(store, "tmp") == []


def test_connection_refused(store):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(artifact_store.ArtifactError, match="cannot connect"):
        store.get(make(f"http://127.0.0.1:{port}/a"))


def test_server_that_never_answers_is_bounded(server, tmp_path):
    store = artifact_store.Store(cache_dir=tmp_path / "cache", timeout=1)
    start = time.monotonic()
    with pytest.raises(artifact_store.ArtifactError, match=r"no answer within 1s"):
        store.get(make(server.url + "/slow"))
    assert time.monotonic() - start < 10
    assert cache_files(store, "sha256") == []


def test_next_url_is_tried_and_failures_are_listed(server, store):
    artifact = make([server.url + "/missing", server.add("a", CONTENT)])
    assert store.get(artifact).read_bytes() == CONTENT
    with pytest.raises(artifact_store.ArtifactError) as info:
        store.get(make([server.url + "/missing", server.url + "/truncated"], content=b"other"))
    assert "/missing: HTTP 404" in str(info.value) and "/truncated: truncated" in str(info.value)


def test_two_builds_fetching_at_once_download_once(server, store):
    server.delay = 0.5
    artifact = make(server.add("a", CONTENT))
    results: list = []
    threads = [
        threading.Thread(target=lambda: results.append(store.get(artifact))) for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2 and results[0] == results[1]
    assert server.hits["GET /files/a"] == 1


def test_unpinned_is_refused_unless_allowed(server, tmp_path):
    artifact = make(server.add("a", CONTENT), sha256=None)
    with pytest.raises(
        artifact_store.ArtifactError, match=r"no sha256 in the lock .*lock update libfabric"
    ):
        artifact_store.Store(cache_dir=tmp_path / "c").get(artifact)
    path = artifact_store.Store(cache_dir=tmp_path / "c", allow_unpinned=True).get(artifact)
    assert path.read_bytes() == CONTENT and "unpinned" in path.parts


def test_preflight_reports_every_problem_at_once(server, store):
    good = make(server.add("a", CONTENT), name="good")
    missing = make(server.url + "/missing", name="missing")
    unpinned = make(server.add("b", CONTENT), name="unpinned", sha256=None)
    slow = make(server.url + "/slow", name="slow")
    start = time.monotonic()
    checks = store.preflight([good, missing, unpinned, slow])
    assert time.monotonic() - start < 10
    assert [c.ok for c in checks] == [True, False, False, False]
    report = preflight.report(checks, None, "Or build the nearest flavour ...")
    assert report.startswith("3 of 4 artifacts cannot be had:")
    for name in ("missing", "unpinned", "slow"):
        assert f"  {name} 2.1.0 (libfabric-2.1.0.tar.bz2)" in report
    assert "--mirror" in report and report.endswith("\nOr build the nearest flavour ...")
    assert "nearest" not in preflight.report(checks, None)
    assert "into the mirror /srv/m" in preflight.report(checks, "/srv/m")
    assert server.hits["HEAD /files/a"] == 1 and server.hits["GET /files/a"] == 0
    assert cache_files(store, "sha256") == []


def test_mirror_roundtrip_directory_and_url(server, tmp_path):
    artifact = make(server.add("a", CONTENT))
    upstream = artifact_store.Store(cache_dir=tmp_path / "cache1")
    root = tmp_path / "mirror"
    # The cache and the mirror share a filesystem here: a hard link, not a copy.
    assert mirror.place(upstream, artifact, root) == "linked"
    placed = root / artifact.mirror_path()
    assert placed.samefile(upstream.cached_path(artifact))
    assert mirror.place(upstream, artifact, root) == "present"
    mirror.write_index(root, [artifact])
    assert (root / "SHA256SUMS").read_text() == f"{artifact.sha256}  {artifact.mirror_path()}\n"
    offline = make("https://unreachable.invalid/a")
    from_dir = artifact_store.Store(cache_dir=tmp_path / "cache2", mirror=str(root))
    assert from_dir.get(offline).read_bytes() == CONTENT
    server.add(artifact.mirror_path(), CONTENT)
    from_url = artifact_store.Store(cache_dir=tmp_path / "cache3", mirror=f"{server.url}/files/")
    assert from_url.sources(offline) == [f"{server.url}/files/{artifact.mirror_path()}"]
    assert from_url.get(offline).read_bytes() == CONTENT
    assert from_url.check(offline).ok


def test_mirror_copies_across_filesystems_and_replaces_a_tampered_file(
    server, tmp_path, monkeypatch
):
    artifact = make(server.add("a", CONTENT))
    store = artifact_store.Store(cache_dir=tmp_path / "cache")
    root = tmp_path / "mirror"
    placed = root / artifact.mirror_path()
    placed.parent.mkdir(parents=True)
    placed.write_bytes(b"tampered")

    def cross_device(source, target):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(mirror.os, "link", cross_device)
    assert mirror.place(store, artifact, root) == "copied"
    assert placed.read_bytes() == CONTENT
    assert not placed.samefile(store.cached_path(artifact))
    assert mirror.place(store, artifact, root) == "present"
    assert not list(placed.parent.glob(".*.partial"))


def sha512(data: bytes) -> str:
    return hashlib.sha512(data).hexdigest()


def make512(url: str, content: bytes = CONTENT, **fields) -> Artifact:
    """An entry pinned as aws-ofi-nccl's releases are: by sha512 only."""
    return make(url, content, sha256=None, sha512=sha512(content), digest_kind="sha512", **fields)


def test_sha512_pinned_file_downloads_verifies_and_is_cached_by_its_sha512(server, store):
    artifact = make512(server.add("plugin.tar.gz", CONTENT))
    assert artifact.pinned and artifact.digest == sha512(CONTENT)
    path = store.get(artifact)
    assert path == store.cache_dir / "sha512" / sha512(CONTENT)
    assert path.read_bytes() == CONTENT
    # Found again by its pin, verified, not downloaded twice.
    assert store.get(artifact) == path
    assert server.hits["GET /files/plugin.tar.gz"] == 1
    assert store.check(artifact).where == "cache"
    assert cache_files(store, "sha256") == [] and cache_files(store, "tmp") == []


def test_tampered_sha512_pinned_file_is_refused_naming_sha512(server, store):
    artifact = make512(server.add("plugin.tar.gz", CONTENT + b"tampered"))
    with pytest.raises(artifact_store.ChecksumMismatch) as info:
        store.get(artifact)
    message = str(info.value)
    assert f"sha512 {sha512(CONTENT + b'tampered')} does not match the lock's" in message
    assert sha512(CONTENT) in message and "sha256" not in message
    assert cache_files(store, "sha512") == []
    assert len(cache_files(store, "quarantine")) == 1
    # A cached file tampered with afterwards is refused the same way.
    good = make512(server.add("good.tar.gz", CONTENT))
    path = store.get(good)
    path.write_bytes(b"changed in the cache")
    with pytest.raises(artifact_store.ChecksumMismatch, match=r"the cache .*: sha512 "):
        store.get(good)


def test_unpinned_sha512_entry_is_refused_naming_sha512(server, tmp_path):
    artifact = make512(server.add("a", CONTENT)).with_digest(None)
    assert not artifact.pinned and artifact.digest_kind == "sha512"
    store = artifact_store.Store(cache_dir=tmp_path / "cache")
    with pytest.raises(artifact_store.ArtifactError, match="has no sha512 in the lock"):
        store.get(artifact)


def test_mirror_of_a_sha512_pinned_file_indexes_both_digests(server, tmp_path):
    import json

    pinned512 = make512(server.add("p", CONTENT), name="aws_ofi_nccl", filename="p.tar.gz")
    pinned256 = make(server.add("a", CONTENT))
    root = tmp_path / "mirror"
    mirror.create(artifact_store.Store(cache_dir=tmp_path / "cache"), [pinned512, pinned256], root)
    index = {entry["name"]: entry for entry in json.loads((root / "index.json").read_text())}
    assert index["aws_ofi_nccl"]["sha512"] == sha512(CONTENT)
    assert index["aws_ofi_nccl"]["sha256"] == sha(CONTENT)
    assert "sha512" not in index["libfabric"]
    # SHA256SUMS covers every file; SHA512SUMS the files pinned by sha512.
    assert len((root / "SHA256SUMS").read_text().splitlines()) == 2
    sums512 = (root / "SHA512SUMS").read_text()
    assert sums512 == f"{sha512(CONTENT)}  {pinned512.mirror_path()}\n"
    offline = make512("https://unreachable.invalid/p", name="aws_ofi_nccl", filename="p.tar.gz")
    from_dir = artifact_store.Store(cache_dir=tmp_path / "cache2", mirror=str(root))
    assert from_dir.get(offline).read_bytes() == CONTENT


def test_mirror_keeps_both_variants_of_one_entry_and_version(server, tmp_path):
    """A profile's overlay (cuda13: nvidia-nccl-cu13) and the lock (cu12) name one
    entry at one version with two files: the mirror indexes both."""
    import json

    cu12, cu13 = b"cu12 wheel", b"cu13 wheel"
    root = tmp_path / "mirror"
    store = artifact_store.Store(cache_dir=tmp_path / "cache")
    fields = {"name": "nccl_wheel", "version": "2.30.7", "role": "nccl"}
    first = make(server.add("cu12", cu12), cu12, filename="nvidia_nccl_cu12.whl", **fields)
    second = make(server.add("cu13", cu13), cu13, filename="nvidia_nccl_cu13.whl", **fields)
    mirror.create(store, [first], root)
    mirror.create(store, [second], root)
    index = json.loads((root / "index.json").read_text())
    assert [entry["filename"] for entry in index] == [
        "nvidia_nccl_cu12.whl",
        "nvidia_nccl_cu13.whl",
    ]
    assert len((root / "SHA256SUMS").read_text().splitlines()) == 2
