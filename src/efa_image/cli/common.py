"""What several verbs share: the artifact options, and the store, context and
selection they name.

The artifact modules need PyYAML, which `efa-image setup` runs without (it runs
with the system Python before the virtualenv exists): they are imported when a
verb that uses them runs, never when the parser is assembled.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from efa_image.artifacts.artifact_store import Store
    from efa_image.artifacts.context import Context, Selection


def artifact_options(parser: argparse.ArgumentParser, selection: bool = True) -> None:
    parser.add_argument("--lock", metavar="FILE", help="lock file (default: the project's)")
    parser.add_argument(
        "--lock-overlay",
        action="append",
        metavar="FILE",
        default=[p for p in os.environ.get("EFA_IMAGE_LOCK_OVERLAY", "").split(":") if p],
        help="file whose efa_image_artifacts_overlay replaces fields of lock entries "
        "(env EFA_IMAGE_LOCK_OVERLAY, colon-separated)",
    )
    parser.add_argument(
        "--mirror",
        metavar="DIR|URL",
        default=os.environ.get("EFA_IMAGE_MIRROR"),
        help="take every artifact from this mirror only (env EFA_IMAGE_MIRROR)",
    )
    parser.add_argument(
        "--cache",
        metavar="DIR",
        help="artifact cache (env EFA_IMAGE_CACHE, default ~/.cache/efa-image)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=20.0,
        metavar="S",
        help="connect and read timeout per request (default 20)",
    )
    if selection:
        parser.add_argument("--flavor", help="artifacts of this image flavour")
        parser.add_argument("--profile", help="with --flavor: the profile choosing role methods")
        parser.add_argument("--name", action="append", metavar="NAME", help="this artifact only")
        parser.add_argument(
            "--allow-unpinned",
            action="store_true",
            help="accept artifacts without a sha256 in the lock (not reproducible); build "
            "passes it on to the roles (artifact_allow_unpinned)",
        )


def load_store(args: argparse.Namespace, allow_unpinned: bool = False) -> Store:
    from efa_image.artifacts import artifact_store

    return artifact_store.Store(
        cache_dir=Path(args.cache) if args.cache else None,
        mirror=args.mirror or None,
        allow_unpinned=allow_unpinned or getattr(args, "allow_unpinned", False),
        timeout=args.timeout,
    )


def load_context(args: argparse.Namespace, allow_unpinned: bool = False) -> Context:
    """The lock, store and catalog the options name (see efa_image.artifacts.context)."""
    from efa_image.artifacts import context

    # Selection by name alone, and the lock subcommands, use no profile's overlay.
    by_name = getattr(args, "name", None) and not getattr(args, "profile", None)
    profile = None if by_name or not hasattr(args, "profile") else args.profile or ""
    lock_file = Path(args.lock) if args.lock else None
    overlays = [Path(p) for p in args.lock_overlay]
    return context.load(lock_file, overlays, profile, load_store(args, allow_unpinned))


def select_artifacts(args: argparse.Namespace, context: Context, everything: bool) -> Selection:
    selection = context.select(args.name, args.flavor, args.profile, everything)
    if selection.flavor:
        print(f"flavour {selection.flavor}, profile {selection.profile}", flush=True)
    return selection
