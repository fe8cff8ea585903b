"""`efa-image setup` and `efa-image base`: the toolchain, and the base images."""

from __future__ import annotations

import argparse

from efa_image.building import base, base_recipes
from efa_image.errors import EfaImageError
from efa_image.setup import toolchain
from efa_image.setup.engine import ensure_docker
from efa_image.timing import StepTimer


def cmd_setup(_args: argparse.Namespace) -> None:
    toolchain.setup()


def cmd_base(args: argparse.Namespace) -> None:
    if args.list:
        for recipe in base_recipes.RECIPES.values():
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
    names = args.names or ([] if args.image else list(base_recipes.DEFAULT_RECIPES))
    for name in names:
        if name not in base_recipes.RECIPES:
            known = ", ".join(base_recipes.RECIPES)
            raise EfaImageError(f"unknown base image recipe {name!r}; known: {known}")
    for name in names:
        with timer.step(name):
            print(base.ensure(name, rebuild=args.rebuild), flush=True)
    print(timer.summary())


def add_parsers(sub: argparse._SubParsersAction) -> None:
    setup = sub.add_parser("setup", help="install what builds and tests need (root, Debian)")
    setup.set_defaults(func=cmd_setup)

    base_cmd = sub.add_parser(
        "base",
        help="make base images locally when they are not present",
        description="Build the named base images with mmdebstrap + docker import, reusing "
        "those whose recipe is unchanged. Recipes: "
        + "; ".join(f"{r.name}: {r.description}" for r in base_recipes.RECIPES.values()),
    )
    base_cmd.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"recipes to build (default: {' '.join(base_recipes.DEFAULT_RECIPES)})",
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
