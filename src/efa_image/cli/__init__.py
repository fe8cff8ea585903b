"""The `efa-image` command: a thin front over mmdebstrap, docker, packer and ansible.

It adds what those tools lack (set-up, locally bootstrapped base images, the
artifact mirror, verification, reports) and hands everything else to them.
One module per group of verbs, as molecule's `command/`: setup (setup, base),
artifacts (fetch, mirror, lock), build, push, verify, distribution; each adds
its parsers and holds its commands. This module assembles them and runs one.
`efa-image setup` runs this with the system Python before the virtualenv
exists: assembling the parser imports no third-party package.
"""

from __future__ import annotations

import argparse
import logging
import sys

from efa_image import __version__
from efa_image.cli import artifacts, build, distribution, push, setup, verify
from efa_image.errors import EfaImageError

WORKFLOW = """\
workflow:
  efa-image setup          install Debian packages, start dockerd, create the virtualenv
  efa-image base           make the base images (mmdebstrap + docker import) if missing
  efa-image fetch          check and download every pinned artifact a build needs
  efa-image mirror create  copy the artifacts into a directory for offline builds
  efa-image lock update    pin an artifact: download it and write its sha256 into the lock
  efa-image lock outdated  the newest upstream version of every entry against its pin
  make image / make test   the two commands most users need (see README.md)

Every subcommand exits non-zero with one line saying what to do when it fails;
-v shows the commands it runs.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="efa-image",
        description="Build GPU distributed-training images for AWS (EFA, Open MPI, NCCL) "
        "from Ansible roles, as Docker images and EC2 AMIs.",
        epilog=WORKFLOW,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show underlying commands")
    parser.add_argument("--version", action="version", version=f"efa-image {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # In the order `efa-image --help` lists them.
    for verbs in (setup, build, push, verify, artifacts, distribution):
        verbs.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(message)s",
        stream=sys.stderr,
    )
    try:
        # A verb may answer with its exit status (lock outdated --fail-on-outdated).
        status = args.func(args)
    except EfaImageError as exc:
        print(f"efa-image: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("efa-image: interrupted", file=sys.stderr)
        return 130
    return status if isinstance(status, int) else 0
