"""`efa-image fetch`, `mirror create`, `lock list`, `lock update` and `lock outdated`:
the artifacts."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from efa_image.cli.common import artifact_options, load_context, load_store, select_artifacts
from efa_image.errors import EfaImageError


def cmd_fetch(args: argparse.Namespace) -> None:
    from efa_image.artifacts import preflight

    context = load_context(args)
    checks = preflight.run(context, select_artifacts(args, context, everything=False))
    if args.check:
        return
    for check in checks:
        start = time.monotonic()
        path = context.store.get_checked(check)
        print(f"  {check.artifact.name:28} {path}  ({time.monotonic() - start:.1f}s)", flush=True)


def cmd_mirror_create(args: argparse.Namespace) -> None:
    from efa_image.artifacts import mirror, preflight

    context = load_context(args)
    selection = select_artifacts(args, context, everything=True)
    preflight.run(context, selection, suggest=False)
    root = Path(args.directory)
    mirror.create(context.store, selection.artifacts, root)
    count = len(selection.artifacts)
    print(f"mirror {root}: {count} artifacts, index.json and SHA256SUMS written")


def cmd_lock_list(args: argparse.Namespace) -> None:
    context = load_context(args)
    for artifact in context.lock.artifacts.values():
        pin = artifact.digest[:12] if artifact.digest else "UNPINNED"
        if artifact.digest_kind != "sha256":
            pin = f"{artifact.digest_kind}:{pin}"
        source = context.store.sources(artifact)[0]
        print(f"{artifact.name:28} {artifact.version:12} {artifact.role:14} {pin:12} {source}")


def cmd_lock_outdated(args: argparse.Namespace) -> int:
    from efa_image.artifacts import lock, outdated, wheelset

    context = load_context(args)
    lock_path = Path(args.lock) if args.lock else lock.default_lock_path()
    sets = {a.wheelset for a in context.lock.artifacts.values() if a.wheelset}
    requirements = {}
    for name in sets:
        spec = wheelset.read_spec(lock_path, name)
        if spec and spec.requirements:
            requirements[name] = spec.requirements[0]
    entries = outdated.entries_of(context.lock.artifacts.values(), requirements)
    if args.name:
        wanted = set(args.name)
        unknown = wanted - {entry.name for entry in entries}
        if unknown:
            context.lock.select(sorted(unknown))  # raises, naming the known entries
        entries = [entry for entry in entries if entry.name in wanted]
    upstream = outdated.Upstream(
        pypi=args.pypi_url,
        github=args.github_url,
        debian_suites=tuple(args.debian_suite or outdated.DEFAULT_DEBIAN_SUITES),
        mirror=args.mirror or None,
        timeout=args.timeout,
    )
    reports = outdated.check(entries, upstream)
    sys.stdout.write(outdated.to_json(reports) if args.json else outdated.format_table(reports))
    if args.fail_on_outdated and any(r.status == outdated.OUTDATED for r in reports):
        return 1
    return 0


def cmd_lock_update(args: argparse.Namespace) -> None:
    from efa_image.artifacts import lock, pin, wheelset

    lock_path = Path(args.lock) if args.lock else lock.default_lock_path()
    # A wheel set is resolved before the lock can parse it (its wheels may not exist yet).
    spec = wheelset.read_spec(lock_path, args.name)
    if spec is not None:
        start = time.monotonic()
        updated = wheelset.update(lock_path, spec, load_store(args, allow_unpinned=False))
        state = "changed" if updated.diff else "already pinned"
        sys.stdout.write(updated.diff)
        print(
            f"{updated.name} {updated.version}: {updated.count} wheels resolved, fetched and "
            f"verified, {state} ({time.monotonic() - start:.0f}s)"
        )
        return
    context = load_context(args, allow_unpinned=True)
    if wheelset_name := context.lock.get(args.name).wheelset:
        raise EfaImageError(
            f"{args.name} is a file of the wheel set {wheelset_name}, pinned with the set: "
            f"run `efa-image lock update {wheelset_name}`"
        )
    pinned = pin.pin(context.lock, context.store, args.name)
    if not pinned.diff:
        kind = pinned.digest_kind
        print(f"{pinned.name} {pinned.version}: {kind} {pinned.digest} already pinned")
    sys.stdout.write(pinned.diff)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    fetch = sub.add_parser(
        "fetch",
        help="check every artifact a build needs, then download and verify it into the cache",
        description="Pre-flight every artifact of the flavour (default: the default flavour "
        "and profile), reporting all missing or unreachable ones at once, then download "
        "what is not cached and verify it by sha256.",
    )
    artifact_options(fetch)
    fetch.add_argument("--check", action="store_true", help="pre-flight only, download nothing")
    fetch.set_defaults(func=cmd_fetch)

    mirror_cmd = sub.add_parser("mirror", help="offline mirrors of the artifacts")
    mirror_sub = mirror_cmd.add_subparsers(dest="mirror_command", required=True, metavar="ACTION")
    create = mirror_sub.add_parser(
        "create",
        help="copy artifacts (default: the whole lock) into DIR",
        description="Copy the verified artifacts into DIR/NAME/VERSION/FILENAME and write "
        "DIR/index.json and DIR/SHA256SUMS. Serve DIR over HTTP or copy it to the build "
        "host, then build with --mirror DIR|URL.",
    )
    create.add_argument("directory", metavar="DIR")
    artifact_options(create)
    create.set_defaults(func=cmd_mirror_create)

    lock_cmd = sub.add_parser("lock", help="inspect and pin the artifact lock")
    lock_sub = lock_cmd.add_subparsers(dest="lock_command", required=True, metavar="ACTION")
    listing = lock_sub.add_parser("list", help="every artifact with version, role, pin, source")
    artifact_options(listing, selection=False)
    listing.set_defaults(func=cmd_lock_list)
    update = lock_sub.add_parser(
        "update",
        help="download NAME, compute its sha256 (sha512 for an entry pinned so) and write it "
        "into the lock (shows the diff); "
        "for a wheel set, resolve its dependency closure on its index and pin every wheel",
    )
    update.add_argument("name", metavar="NAME")
    artifact_options(update, selection=False)
    update.set_defaults(func=cmd_lock_update)
    stale = lock_sub.add_parser(
        "outdated",
        help="per entry, the newest version its upstream index offers against the pin",
        description="Ask, in parallel and with bounded timeouts, the index each lock entry "
        "comes from (PyPI, GitHub, Debian's Sources index; with --mirror, the mirror's "
        "index.json) for its newest release, pre-releases left out. One line per entry: "
        "name, pinned, newest, status (current, outdated, unknown) and source; a source "
        "that does not answer makes its entries unknown ('unreachable: ...'). Exit 0 "
        "unless --fail-on-outdated and something is outdated.",
    )
    artifact_options(stale, selection=False)
    stale.add_argument("--name", action="append", metavar="NAME", help="this entry only")
    stale.add_argument("--json", action="store_true", help="a JSON list instead of the table")
    stale.add_argument(
        "--fail-on-outdated", action="store_true", help="exit 1 when an entry is outdated"
    )
    stale.add_argument(
        "--pypi-url", default="https://pypi.org/pypi", metavar="URL", help="PyPI's JSON API"
    )
    stale.add_argument(
        "--github-url", default="https://api.github.com", metavar="URL", help="GitHub's API"
    )
    stale.add_argument(
        "--debian-suite",
        action="append",
        metavar="SUITE",
        help="Debian suite(s) whose Sources index answers for Debian pool URLs (default: unstable)",
    )
    stale.set_defaults(func=cmd_lock_outdated)
