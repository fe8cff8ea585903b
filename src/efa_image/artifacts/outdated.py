"""`efa-image lock outdated`: per lock entry, the newest upstream version against the pin.

Which index answers for an entry follows from its URLs (the first that one of
these adapters reads):

- files.pythonhosted.org: PyPI's JSON API (`<pypi>/<project>/json`), the project
  read from the wheel's or sdist's file name; a wheel set asks for the project of
  its first requirement (torch for `torch=={version}`). Yanked releases do not count.
- github.com/OWNER/REPO: GitHub's API, the latest release
  (`/repos/O/R/releases/latest`), or the tags where the project publishes none.
- .../debian/pool/COMPONENT/X/SOURCE/...: Debian's signed source index of the
  same archive (`dists/<suite>/<component>/source/Sources.xz`, 10 MB, read once
  per suite and run). Chosen over `apt-cache`, which answers only for the suites
  the host's sources.list names (here bookworm, and no deb-src), and over the
  pool's directory listing, which the archive's proxies do not serve.
- With a mirror (--mirror), its index.json (NAME/VERSION/FILENAME) answers for
  every entry instead: what a build from that mirror could move to.

Anything else (efa-installer.amazonaws.com, download.open-mpi.org, S3) is "no
index". A source that does not answer within the timeout, or answers with an
error, makes that entry "unknown" with `unreachable: <one line>`; the others
are unaffected. Questions run in parallel, each one once.

Versions compare as packaging.version does (a leading `v` and Debian's epoch,
revision and +dfsg/+ds repack suffix dropped); pre-releases and development
releases never count as newest unless the pin is one itself.
"""

from __future__ import annotations

import json
import lzma
import re
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from efa_image.artifacts import lock_schema
from efa_image.artifacts.artifact_store import USER_AGENT, transfer_error
from efa_image.artifacts.lock_model import Artifact, LockError

DEFAULT_PYPI = "https://pypi.org/pypi"
DEFAULT_GITHUB = "https://api.github.com"
DEFAULT_DEBIAN_SUITES = ("unstable",)
DEFAULT_TIMEOUT = 10.0

CURRENT, OUTDATED, UNKNOWN = "current", "outdated", "unknown"
GITHUB = re.compile(r"^https?://github\.com/([^/]+)/([^/]+)/")
DEBIAN_POOL = re.compile(r"^(https?://.+?)/pool/([^/]+)/[^/]+/([^/]+)/")
PYPI_HOSTS = ("files.pythonhosted.org", "pypi.org", "pypi.python.org")


class Unreachable(Exception):
    """The source gave no answer: the message is one line."""


@dataclass(frozen=True)
class Entry:
    """One line of the report's input: a lock entry (a wheel set counts once)."""

    name: str
    pinned: str
    urls: tuple[str, ...]
    filename: str = ""
    # PyPI project asked about instead of the file name's (a wheel set's requirement).
    project: str = ""


@dataclass(frozen=True)
class Query:
    """One question to one index: kind (pypi, github, debian, mirror, none) and its key."""

    kind: str
    key: str
    base: str = ""
    component: str = ""

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.key}" if self.kind != "none" else self.key


@dataclass(frozen=True)
class Report:
    name: str
    pinned: str
    newest: str | None
    source: str
    status: str
    detail: str = ""


@dataclass
class Upstream:
    """Where the indexes are, and how long to wait for each."""

    pypi: str = DEFAULT_PYPI
    github: str = DEFAULT_GITHUB
    debian_suites: tuple[str, ...] = DEFAULT_DEBIAN_SUITES
    mirror: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    _debian: dict[tuple[str, str, str], dict[str, list[str]]] = field(
        default_factory=dict, repr=False
    )
    _debian_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # Transport ---------------------------------------------------------------

    def get(self, url: str, accept: str = "application/json") -> bytes:
        if "://" not in url:
            url = Path(url).resolve().as_uri()
        request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, "Accept": accept})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return response.read()
        except OSError as exc:
            raise Unreachable(f"{url}: {transfer_error(exc, self.timeout)}") from exc

    def get_json(self, url: str, accept: str = "application/json") -> object:
        try:
            return json.loads(self.get(url, accept))
        except ValueError as exc:
            raise Unreachable(f"{url}: not JSON ({exc})") from exc

    # Adapters: the versions each index offers --------------------------------

    def versions(self, query: Query) -> list[str]:
        adapters: dict[str, Callable[[Query], list[str]]] = {
            "pypi": self._pypi,
            "github": self._github,
            "debian": self._debian_versions,
            "mirror": self._mirror,
        }
        return adapters[query.kind](query)

    def _pypi(self, query: Query) -> list[str]:
        data = self.get_json(f"{self.pypi.rstrip('/')}/{query.key}/json")
        releases = data.get("releases") if isinstance(data, dict) else None
        if not isinstance(releases, dict):
            raise Unreachable(f"PyPI answered for {query.key} without releases")
        # A release whose every file is yanked is not one to move to.
        return [
            version
            for version, files in releases.items()
            if files and not all(isinstance(f, dict) and f.get("yanked") for f in files)
        ]

    def _github(self, query: Query) -> list[str]:
        api = f"{self.github.rstrip('/')}/repos/{query.key}"
        accept = "application/vnd.github+json"
        try:
            latest = self.get_json(f"{api}/releases/latest", accept)
        except Unreachable as exc:
            if "HTTP 404" not in str(exc):
                raise
            latest = None  # no releases: the tags are the versions
        if isinstance(latest, dict) and latest.get("tag_name"):
            return [str(latest["tag_name"])]
        tags = self.get_json(f"{api}/tags?per_page=100", accept)
        if not isinstance(tags, list):
            raise Unreachable(f"GitHub answered for {query.key} without tags")
        return [str(tag.get("name")) for tag in tags if isinstance(tag, dict)]

    def _debian_versions(self, query: Query) -> list[str]:
        found: list[str] = []
        for suite in self.debian_suites:
            found += self._debian_index(query.base, suite, query.component).get(query.key, [])
        return found

    def _debian_index(self, base: str, suite: str, component: str) -> dict[str, list[str]]:
        """Source package -> versions of one suite's Sources index, fetched once a run."""
        key = (base, suite, component)
        with self._debian_lock:
            if key not in self._debian:
                url = f"{base}/dists/{suite}/{component}/source/Sources.xz"
                try:
                    text = lzma.decompress(self.get(url, "*/*")).decode("utf-8", "replace")
                except lzma.LZMAError as exc:
                    raise Unreachable(f"{url}: not an xz file ({exc})") from exc
                self._debian[key] = parse_sources(text)
            return self._debian[key]

    def _mirror(self, query: Query) -> list[str]:
        assert self.mirror is not None
        index = self.get_json(f"{self.mirror.rstrip('/')}/index.json")
        if not isinstance(index, list):
            raise Unreachable(f"{self.mirror}/index.json: expected a list of entries")
        return [
            str(item.get("version"))
            for item in index
            if isinstance(item, dict) and item.get("name") == query.key
        ]


def parse_sources(text: str) -> dict[str, list[str]]:
    """Debian Sources stanzas as source package -> versions."""
    packages: dict[str, list[str]] = {}
    package = None
    for line in text.splitlines():
        if line.startswith("Package:"):
            package = line.split(":", 1)[1].strip()
        elif line.startswith("Version:") and package:
            packages.setdefault(package, []).append(line.split(":", 1)[1].strip())
        elif not line.strip():
            package = None
    return packages


def parse_version(text: str, debian: bool = False) -> Version | None:
    """A version as packaging reads it: 'v1.21.1' -> 1.21.1; with debian, the upstream
    part of a Debian version ('1:5.1.0.dfsg-7' -> 5.1.0); None for what is no version."""
    text = display(text)
    if not debian:
        try:
            return Version(text)
        except InvalidVersion:
            return None
    debian = re.sub(r"^\d+:", "", text)  # epoch
    debian = re.sub(r"-[^-]+$", "", debian)  # Debian revision
    debian = re.sub(r"[.+~](dfsg|ds)\d*$", "", debian)
    try:
        return Version(debian)
    except InvalidVersion:
        return None


def display(text: str) -> str:
    """A tag as a version: 'v1.21.1' -> '1.21.1', 'nccl-tests-2.17.6' -> '2.17.6'."""
    return re.sub(r"^[^0-9]*", "", text.strip())


def newest(candidates: Iterable[str], pinned: str, debian: bool = False) -> str | None:
    """The newest candidate; pre- and development releases only if the pin is one."""
    pin = parse_version(pinned)
    allow_pre = pin is not None and (pin.is_prerelease or pin.is_devrelease)
    best: tuple[Version, str] | None = None
    for text in candidates:
        version = parse_version(text, debian)
        if version is None or ((version.is_prerelease or version.is_devrelease) and not allow_pre):
            continue
        if best is None or version > best[0]:
            best = (version, text)
    return best[1] if best else None


def query_for(entry: Entry, mirror: str | None = None) -> Query:
    """Which index answers for an entry, from its URLs (the module's docstring)."""
    if mirror:
        return Query("mirror", entry.name)
    for url in entry.urls:
        host = urllib.parse.urlsplit(url).hostname or ""
        if host in PYPI_HOSTS:
            project = entry.project or pypi_project(entry.filename or url.rsplit("/", 1)[-1])
            if project:
                return Query("pypi", project)
        if match := GITHUB.match(url):
            return Query("github", f"{match.group(1)}/{match.group(2)}")
        if match := DEBIAN_POOL.match(url):
            return Query("debian", match.group(3), match.group(1), match.group(2))
    hosts = sorted({urllib.parse.urlsplit(url).hostname or url for url in entry.urls})
    return Query("none", f"no index for {', '.join(hosts)}")


def pypi_project(filename: str) -> str:
    for reader in (lock_schema.wheel_name_version, lock_schema.sdist_name_version):
        try:
            return reader(filename, filename)[0]
        except LockError:
            continue
    return ""


def entries_of(artifacts: Iterable[Artifact], requirements: dict[str, str]) -> list[Entry]:
    """One Entry per lock entry: a plain entry as it is, a wheel set once, asked about by
    the project of its first requirement (requirements: set name -> requirement)."""
    entries: dict[str, Entry] = {}
    for artifact in artifacts:
        if not artifact.wheelset:
            entries[artifact.name] = Entry(
                artifact.name, artifact.version, artifact.urls, artifact.filename
            )
            continue
        if artifact.wheelset in entries:
            continue
        try:
            project = canonicalize_name(Requirement(requirements[artifact.wheelset]).name)
        except (KeyError, InvalidRequirement):
            project = ""
        entries[artifact.wheelset] = Entry(
            artifact.wheelset,
            artifact.wheelset_version,
            ("https://files.pythonhosted.org/",) if project else (),
            project=project,
        )
    return list(entries.values())


def check(entries: list[Entry], upstream: Upstream, workers: int = 8) -> list[Report]:
    """Ask every index once, in parallel; one Report per entry, in the entries' order."""
    queries = {entry.name: query_for(entry, upstream.mirror) for entry in entries}
    distinct = sorted({q for q in queries.values() if q.kind != "none"}, key=lambda q: q.label)
    answers: dict[Query, list[str] | Unreachable] = {}

    def ask(query: Query) -> tuple[Query, list[str] | Unreachable]:
        try:
            return query, upstream.versions(query)
        except Unreachable as exc:
            return query, exc
        except Exception as exc:  # a malformed answer: one line, never a traceback
            return query, Unreachable(f"{type(exc).__name__}: {exc}")

    if distinct:
        with ThreadPoolExecutor(max_workers=min(workers, len(distinct))) as pool:
            answers = dict(pool.map(ask, distinct))
    reports = []
    for entry in entries:
        query = queries[entry.name]
        if query.kind == "none":
            reports.append(Report(entry.name, entry.pinned, None, query.label, UNKNOWN))
            continue
        answer = answers[query]
        if isinstance(answer, Unreachable):
            line = " ".join(str(answer).split())
            reports.append(
                Report(entry.name, entry.pinned, None, query.label, UNKNOWN, f"unreachable: {line}")
            )
            continue
        reports.append(compare(entry, query, answer))
    return reports


def compare(entry: Entry, query: Query, candidates: list[str]) -> Report:
    debian = query.kind == "debian"
    best = newest(candidates, entry.pinned, debian)
    pin = parse_version(entry.pinned)
    if best is None:
        return Report(entry.name, entry.pinned, None, query.label, UNKNOWN, "no release found")
    found = parse_version(best, debian)
    if pin is None or found is None:
        detail = f"cannot compare {entry.pinned!r}"
        return Report(entry.name, entry.pinned, display(best), query.label, UNKNOWN, detail)
    status = OUTDATED if found > pin else CURRENT
    return Report(entry.name, entry.pinned, display(best), query.label, status)


def format_table(reports: list[Report]) -> str:
    width = max([len(r.name) for r in reports] + [4])
    lines = [f"{'NAME':{width}} {'PINNED':12} {'NEWEST':12} {'STATUS':9} SOURCE"]
    for r in reports:
        line = f"{r.name:{width}} {r.pinned:12} {r.newest or '-':12} {r.status:9} {r.source}"
        lines.append(f"{line}  ({r.detail})" if r.detail else line)
    return "\n".join(lines) + "\n"


def to_json(reports: list[Report]) -> str:
    return json.dumps([asdict(r) for r in reports], indent=2) + "\n"
