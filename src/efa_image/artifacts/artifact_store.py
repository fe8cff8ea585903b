"""Fetch artifacts on the controller into a content-addressed, verified cache.

A download goes to a temporary file next to the cache and enters the cache
(`sha256/<digest>`) only after its sha256 matches the lock. An entry pinned by
sha512 (a publisher that gives no sha256) is verified and kept the same way
under `sha512/<digest>`: the cache is addressed by the digest the lock holds,
so a file is found without hashing anything first. Every use verifies the
cached file again; a file that does not match is moved to `quarantine/` and the
build stops. With a mirror, the mirror is the only source.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from efa_image import __version__
from efa_image.artifacts.lock_model import Artifact
from efa_image.errors import EfaImageError
from efa_image.filelock import exclusive
from efa_image.paths import default_cache_dir

CHUNK = 1 << 20
DEFAULT_TIMEOUT = 20.0
USER_AGENT = f"efa-image/{__version__}"


class ArtifactError(EfaImageError):
    """An artifact that cannot be had or does not verify; the message names it."""


def transfer_error(exc: OSError, timeout: float) -> str:
    """One line for what urllib.request.urlopen, or reading its answer, raised."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return f"cannot connect: {exc.reason}"
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g}s"
    return f"transfer failed: {exc}"


class ChecksumMismatch(ArtifactError):
    pass


def mirror_url(mirror: str, artifact: Artifact) -> str:
    """The artifact's place in a mirror given as a directory or a URL."""
    if "://" in mirror:
        return f"{mirror.rstrip('/')}/{artifact.mirror_path()}"
    return (Path(mirror).resolve() / artifact.mirror_path()).as_uri()


def _flat(name: str) -> str:
    """A name as one path component: a wheel set's files are named `<set>/<project>`."""
    return name.replace("/", "_")


def sha256_of(path: Path) -> str:
    return digest_of(path, "sha256")


def digest_of(path: Path, kind: str) -> str:
    """The hex digest of a file by kind (sha256, sha512)."""
    digest = hashlib.new(kind)
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _human(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1000
    return f"{size:.1f} GB"


class Progress:
    """Prints a line per 10% (or per 5 s without a known size) for large downloads."""

    def __init__(self, label: str, total: int | None, stream: object = sys.stderr) -> None:
        self.label, self.total, self.stream = label, total, stream
        self.start = self.last_time = time.monotonic()
        self.last_step = 0

    def update(self, done: int) -> None:
        now = time.monotonic()
        if self.total:
            step = done * 10 // self.total
            if step > self.last_step and self.total >= 10 * CHUNK:
                self.last_step = step
                self._print(f"{_human(done)} of {_human(self.total)} ({step * 10}%)", now)
        elif now - self.last_time >= 5:
            self.last_time = now
            self._print(_human(done), now)

    def _print(self, text: str, now: float) -> None:
        print(f"  {self.label}: {text}, {now - self.start:.0f}s", file=self.stream, flush=True)


def download(
    url: str,
    dest: Path,
    timeout: float,
    progress: Progress | None = None,
    kind: str = "sha256",
) -> str:
    """Stream url into dest; return its digest of kind. Raises ArtifactError with the cause."""
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    digest = hashlib.new(kind)
    done = 0
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response, dest.open("wb") as out:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            if progress:
                progress.total = total
            while chunk := response.read(CHUNK):
                digest.update(chunk)
                out.write(chunk)
                done += len(chunk)
                if progress:
                    progress.update(done)
    except OSError as exc:
        raise ArtifactError(transfer_error(exc, timeout)) from exc
    if total is not None and done != total:
        raise ArtifactError(f"truncated: got {done} of {total} bytes")
    return digest.hexdigest()


@dataclass(frozen=True)
class Availability:
    """What the pre-flight found for one artifact: whether it can be had, and where (the
    cache, where it is verified, or the source that answered)."""

    artifact: Artifact
    ok: bool
    where: str
    detail: str


class Store:
    def __init__(
        self,
        cache_dir: Path | None = None,
        mirror: str | None = None,
        allow_unpinned: bool = False,
        timeout: float = DEFAULT_TIMEOUT,
        log: Callable[[str], None] = lambda message: print(message, file=sys.stderr, flush=True),
    ) -> None:
        self.cache_dir = cache_dir or default_cache_dir()
        self.mirror = mirror
        self.allow_unpinned = allow_unpinned
        self.timeout = timeout
        self.log = log

    # Layout of the cache ---------------------------------------------------

    def cached_path(self, artifact: Artifact) -> Path:
        if artifact.digest:
            return self.cache_dir / artifact.digest_kind / artifact.digest
        return self.cache_dir / "unpinned" / artifact.name / artifact.version / artifact.filename

    def sources(self, artifact: Artifact) -> list[str]:
        return [mirror_url(self.mirror, artifact)] if self.mirror else list(artifact.urls)

    @contextlib.contextmanager
    def _locked(self, artifact: Artifact) -> Iterator[None]:
        """One download per artifact at a time, across processes."""
        key = artifact.digest or f"{_flat(artifact.name)}-{artifact.version}"
        with exclusive(self.cache_dir / "locks" / f"{key}.lock"):
            yield

    def _quarantine(self, path: Path, artifact: Artifact) -> Path:
        target_dir = self.cache_dir / "quarantine"
        target_dir.mkdir(parents=True, exist_ok=True)
        target = target_dir / f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}-{artifact.filename}"
        shutil.move(str(path), target)
        return target

    def _mismatch(self, artifact: Artifact, source: str, actual: str, moved: Path) -> ArtifactError:
        return ChecksumMismatch(
            f"{artifact.name} {artifact.version} ({artifact.filename}) from {source}: "
            f"{artifact.digest_kind} {actual} does not match the lock's {artifact.digest}; "
            f"the file was moved to {moved} and not used"
        )

    def _require_pin(self, artifact: Artifact) -> None:
        if not artifact.pinned and not self.allow_unpinned:
            raise ArtifactError(
                f"{artifact.name} {artifact.version} has no {artifact.digest_kind} in the lock "
                f"({artifact.origin}): run `efa-image lock update {artifact.name}` to pin it, "
                "or pass --allow-unpinned"
            )

    # Use ------------------------------------------------------------------------

    def verified_cached(self, artifact: Artifact) -> Path | None:
        """The cached file if present and intact; a tampered one is moved aside (and raises)."""
        path = self.cached_path(artifact)
        if not path.is_file():
            return None
        if artifact.digest:
            actual = digest_of(path, artifact.digest_kind)
            if actual != artifact.digest:
                moved = self._quarantine(path, artifact)
                raise self._mismatch(artifact, f"the cache ({path})", actual, moved)
        return path

    def get(self, artifact: Artifact) -> Path:
        """The verified local file for artifact, downloading it when not cached."""
        self._require_pin(artifact)
        with self._locked(artifact):
            cached = self.verified_cached(artifact)
            if cached:
                return cached
            return self._fetch(artifact)

    def get_checked(self, check: Availability) -> Path:
        """Like get after a pre-flight: a file it just verified in the cache is not hashed again."""
        if check.where == "cache":
            return self.cached_path(check.artifact)
        return self.get(check.artifact)

    def _fetch(self, artifact: Artifact) -> Path:
        failures = []
        for url in self.sources(artifact):
            tmp_dir = self.cache_dir / "tmp"
            tmp_dir.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(dir=tmp_dir, prefix=f"{_flat(artifact.name)}-")
            os.close(fd)
            tmp = Path(tmp_name)
            try:
                self.log(f"downloading {artifact.name} {artifact.version} from {url}")
                progress = Progress(artifact.name, None)
                actual = download(url, tmp, self.timeout, progress, artifact.digest_kind)
            except ArtifactError as exc:
                tmp.unlink(missing_ok=True)
                failures.append(f"{url}: {exc}")
                continue
            if artifact.digest and actual != artifact.digest:
                raise self._mismatch(artifact, url, actual, self._quarantine(tmp, artifact))
            target = self.cached_path(artifact)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, target)
            return target
        raise ArtifactError(
            f"{artifact.name} {artifact.version} ({artifact.filename}) could not be downloaded:\n"
            + "\n".join(f"    {failure}" for failure in failures)
        )

    # Pre-flight --------------------------------------------------------------

    def probe(self, url: str) -> str:
        """Ask a source whether it has the file, without downloading it."""
        if url.startswith("file://"):
            path = Path(urllib.request.url2pathname(url[len("file://") :]))
            if not path.is_file():
                raise ArtifactError("no such file")
            return f"{_human(path.stat().st_size)}"
        request = urllib.request.Request(url, method="HEAD", headers={"User-Agent": USER_AGENT})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                length = response.headers.get("Content-Length")
        except OSError as exc:
            raise ArtifactError(transfer_error(exc, self.timeout)) from exc
        return _human(int(length)) if length and length.isdigit() else "size unknown"

    def check(self, artifact: Artifact) -> Availability:
        try:
            self._require_pin(artifact)
            if self.verified_cached(artifact):
                return Availability(artifact, True, "cache", "cached and verified")
        except ArtifactError as exc:
            return Availability(artifact, False, "lock/cache", str(exc))
        failures = []
        for url in self.sources(artifact):
            try:
                return Availability(artifact, True, url, f"reachable, {self.probe(url)}")
            except ArtifactError as exc:
                failures.append(f"{url}: {exc}")
        return Availability(artifact, False, "; ".join(self.sources(artifact)), "; ".join(failures))

    def preflight(self, artifacts: list[Artifact]) -> list[Availability]:
        """Check every artifact at once, in parallel, with bounded timeouts."""
        if not artifacts:
            return []
        with ThreadPoolExecutor(max_workers=min(16, len(artifacts))) as pool:
            return list(pool.map(self.check, artifacts))
