"""The `efa-image` command: a thin front over debootstrap, docker, packer and ansible.

It adds what those tools lack (set-up, locally bootstrapped base images) and
hands everything else to them.
"""

from __future__ import annotations

import argparse
import logging
import sys

from efa_image import __version__, base, toolchain
from efa_image.engine import ensure_docker
from efa_image.errors import EfaImageError
from efa_image.timing import StepTimer

WORKFLOW = """\
workflow:
  efa-image setup          install Debian packages, start dockerd, create the virtualenv
  efa-image base           make the base images (debootstrap + docker import) if missing
  make image / make test   the two commands most users need (see README.md)

Every subcommand exits non-zero with one line saying what to do when it fails;
-v shows the commands it runs.
"""


def cmd_setup(_args: argparse.Namespace) -> None:
    toolchain.setup()


def cmd_base(args: argparse.Namespace) -> None:
    if args.list:
        for recipe in base.RECIPES.values():
            state = "present" if base.is_current(recipe) else "missing or outdated"
            print(f"{recipe.ref:32} {state:20} {recipe.description}")
        return
    if args.clean:
        removed = base.remove_all()
        print("removed: " + (" ".join(removed) if removed else "nothing"))
        return
    ensure_docker()
    timer = StepTimer("base")
    if args.image:
        for ref in args.image:
            with timer.step(ref):
                print(base.ensure_ref(ref), flush=True)
    names = args.names or ([] if args.image else list(base.DEFAULT_RECIPES))
    for name in names:
        if name not in base.RECIPES:
            known = ", ".join(base.RECIPES)
            raise EfaImageError(f"unknown base image recipe {name!r}; known: {known}")
    for name in names:
        with timer.step(name):
            print(base.ensure(name, rebuild=args.rebuild), flush=True)
    print(timer.summary())


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

    setup = sub.add_parser("setup", help="install what builds and tests need (root, Debian)")
    setup.set_defaults(func=cmd_setup)

    base_cmd = sub.add_parser(
        "base",
        help="make base images locally when they are not present",
        description="Build the named base images with debootstrap + docker import, reusing "
        "those whose recipe is unchanged. Recipes: "
        + "; ".join(f"{r.name}: {r.description}" for r in base.RECIPES.values()),
    )
    base_cmd.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"recipes to build (default: {' '.join(base.DEFAULT_RECIPES)})",
    )
    base_cmd.add_argument("--rebuild", action="store_true", help="rebuild even when current")
    base_cmd.add_argument(
        "--image",
        action="append",
        metavar="REF",
        help="make sure this configured base image exists: ours are built, others pulled",
    )
    base_cmd.add_argument("--list", action="store_true", help="show recipes and their state")
    base_cmd.add_argument("--clean", action="store_true", help="remove every base image of ours")
    base_cmd.set_defaults(func=cmd_base)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(message)s",
        stream=sys.stderr,
    )
    try:
        args.func(args)
    except EfaImageError as exc:
        print(f"efa-image: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("efa-image: interrupted", file=sys.stderr)
        return 130
    return 0
