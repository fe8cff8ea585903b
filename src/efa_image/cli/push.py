"""`efa-image push`: a verified image to a registry under its build's tags."""

from __future__ import annotations

import argparse

from efa_image.setup.engine import ensure_docker


def cmd_push(args: argparse.Namespace) -> None:
    from efa_image.building import push

    ensure_docker()
    push.push(args.image, args.repository)


def add_parsers(sub: argparse._SubParsersAction) -> None:
    push_cmd = sub.add_parser(
        "push",
        help="push a verified image under every tag its build gave it (ECR: logs in)",
        description="Push IMAGE, which must have passed verification in `efa-image build` "
        "(its fingerprint recorded as verified here, by that build or by a build that pulled "
        "it by its record), to REPOSITORY "
        "(HOST[:PORT]/NAME, no tag) under its flavour-profile and component tags and "
        "fingerprint-<fingerprint>, then the record that lets `efa-image build --reuse-from "
        "REPOSITORY` on other machines pull it instead of building. For an ECR URI "
        "(<account>.dkr.ecr.<region>.amazonaws.com/<name>) it logs in first with `aws ecr "
        "get-login-password`. Prints each pushed tag's digest.",
    )
    push_cmd.add_argument("image", metavar="IMAGE", help="a tag or ID of a verified build")
    push_cmd.add_argument(
        "repository",
        metavar="REPOSITORY",
        help="HOST[:PORT]/NAME, e.g. 123456789012.dkr.ecr.us-east-1.amazonaws.com/efa-image",
    )
    push_cmd.set_defaults(func=cmd_push)
