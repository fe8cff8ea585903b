"""`efa-image build`: a request from the options, the build, then the push and report."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from efa_image.cli.common import artifact_options, load_context
from efa_image.setup.engine import ensure_docker
from efa_image.types import BuildRequest


def cmd_build(args: argparse.Namespace) -> None:
    from efa_image.building import build, build_cache, push
    from efa_image.registry.reference import parse_repository

    context = load_context(args)
    ensure_docker()
    catalog = context.catalog
    flavor = args.flavor or catalog.default_flavor
    request = BuildRequest(
        flavor=flavor,
        profile=args.profile or catalog.default_profile,
        base_image=args.base_image or catalog.base_image(flavor),
        repository=args.repository,
        mirror=args.mirror or None,
        overlays=tuple(str(p.resolve()) for p in context.overlays),
        extra_vars=tuple(args.extra_var or ()),
        build_cache=args.build_cache,
        rebuild=args.rebuild,
        reuse_from=args.reuse_from or args.push or "",
        detect=not args.no_detect,
    )
    # Bad settings stop before the build, not in it or after it.
    build_cache.locations(request.build_cache)
    if request.reuse_from:
        parse_repository(request.reuse_from)
    if args.push:
        push.destination(args.push)
    result = build.build(request, context)
    try:
        if args.push:
            result.pushed = push.push(result.image, args.push).digests
    finally:
        if args.report:
            Path(args.report).parent.mkdir(parents=True, exist_ok=True)
            Path(args.report).write_text(result.to_json())
            print(f"report: {args.report}")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    build_cmd = sub.add_parser(
        "build",
        help="build an image: plan, pre-flight, fetch, packer build, verify, tag",
        description="Resolve the flavour and profile into a plan (the lock's artifacts, the "
        "base image made present and probed, the compatibility rules judged), pre-flight and "
        "fetch the artifacts the base lacks, run `packer build` on packer/ (docker source), "
        "verify the result and only then tag it with the flavour, profile and component "
        "versions.",
    )
    artifact_options(build_cmd)
    build_cmd.add_argument(
        "--base-image",
        metavar="REF",
        help="base image (a local recipe, a local image or a pullable one; default: the "
        "flavour's, see playbooks/group_vars/all/flavors.yml)",
    )
    build_cmd.add_argument("--repository", default="efa-image", help="repository to tag into")
    build_cmd.add_argument(
        "--extra-var",
        action="append",
        metavar="KEY=VALUE",
        help="extra playbook variable, e.g. efa_method=source",
    )
    build_cmd.add_argument(
        "--build-cache",
        metavar="WHERE",
        default=os.environ.get("EFA_IMAGE_BUILD_CACHE", ""),
        help="keep compiled components and take identical ones back: a directory, "
        "oci://HOST[:PORT]/REPOSITORY (a registry, with the default directory in front) or "
        "DIR,oci://... (env EFA_IMAGE_BUILD_CACHE, default ~/.cache/efa-image/builds; 'off' "
        "compiles everything)",
    )
    build_cmd.add_argument(
        "--reuse-from",
        metavar="REPOSITORY",
        help="before building, look for a verified image of identical inputs pushed to "
        "HOST[:PORT]/NAME (by `push` or `build --push` on any machine): pull, check and tag it "
        "instead of building (default: the --push repository)",
    )
    build_cmd.add_argument(
        "--rebuild",
        action="store_true",
        help="build even when a verified image of identical inputs exists (by default "
        "such an unchanged build tags that image again and runs nothing)",
    )
    build_cmd.add_argument(
        "--no-detect",
        action="store_true",
        help="do not look for the flavour's components in the base image (by default the "
        "ones it has, e.g. a Deep Learning Container's EFA, Open MPI, NCCL and PyTorch, are "
        "verified and recorded, not installed again)",
    )
    build_cmd.add_argument(
        "--report", metavar="FILE", help="write durations (stages, roles), sizes and tags as JSON"
    )
    build_cmd.add_argument(
        "--push",
        metavar="REPOSITORY",
        help="then push the verified image under its tags to REGISTRY/NAME (ECR: logs in "
        "with the aws CLI), with the record that lets builds elsewhere reuse it; the report "
        "lists the pushed digests",
    )
    build_cmd.set_defaults(func=cmd_build)
