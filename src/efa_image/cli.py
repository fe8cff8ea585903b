"""The `efa-image` command: a thin front over mmdebstrap, docker, packer and ansible.

It adds what those tools lack (set-up, locally bootstrapped base images) and
hands everything else to them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from efa_image import __version__
from efa_image.building import base
from efa_image.errors import EfaImageError
from efa_image.setup import toolchain
from efa_image.setup.engine import ensure_docker
from efa_image.timing import StepTimer

if TYPE_CHECKING:  # these need PyYAML, which `setup` runs without
    from efa_image.artifacts.artifact_store import Store
    from efa_image.artifacts.context import Context, Selection

WORKFLOW = """\
workflow:
  efa-image setup          install Debian packages, start dockerd, create the virtualenv
  efa-image base           make the base images (mmdebstrap + docker import) if missing
  efa-image fetch          check and download every pinned artifact a build needs
  efa-image mirror create  copy the artifacts into a directory for offline builds
  efa-image lock update    pin an artifact: download it and write its sha256 into the lock
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


def _store(args: argparse.Namespace, allow_unpinned: bool = False) -> Store:
    from efa_image.artifacts import artifact_store

    return artifact_store.Store(
        cache_dir=Path(args.cache) if args.cache else None,
        mirror=args.mirror or None,
        allow_unpinned=allow_unpinned or getattr(args, "allow_unpinned", False),
        timeout=args.timeout,
    )


def _context(args: argparse.Namespace, allow_unpinned: bool = False) -> Context:
    """The lock, store and catalog the options name (see efa_image.artifacts.context)."""
    from efa_image.artifacts import context

    store = _store(args, allow_unpinned)
    # Selection by name alone, and the lock subcommands, use no profile's overlay.
    by_name = getattr(args, "name", None) and not getattr(args, "profile", None)
    profile = None if by_name or not hasattr(args, "profile") else args.profile or ""
    lock_file = Path(args.lock) if args.lock else None
    overlays = [Path(p) for p in args.lock_overlay]
    return context.load(lock_file, overlays, profile, store)


def _select(args: argparse.Namespace, context: Context, everything: bool) -> Selection:
    selection = context.select(args.name, args.flavor, args.profile, everything)
    if selection.flavor:
        print(f"flavour {selection.flavor}, profile {selection.profile}", flush=True)
    return selection


def cmd_fetch(args: argparse.Namespace) -> None:
    from efa_image.artifacts import preflight

    context = _context(args)
    checks = preflight.run(context, _select(args, context, everything=False))
    if args.check:
        return
    for check in checks:
        start = time.monotonic()
        path = context.store.get_checked(check)
        print(f"  {check.artifact.name:28} {path}  ({time.monotonic() - start:.1f}s)", flush=True)


def cmd_mirror_create(args: argparse.Namespace) -> None:
    from efa_image.artifacts import mirror, preflight

    context = _context(args)
    selection = _select(args, context, everything=True)
    preflight.run(context, selection, suggest=False)
    root = Path(args.directory)
    mirror.create(context.store, selection.artifacts, root)
    count = len(selection.artifacts)
    print(f"mirror {root}: {count} artifacts, index.json and SHA256SUMS written")


def cmd_lock_list(args: argparse.Namespace) -> None:
    context = _context(args)
    for artifact in context.lock.artifacts.values():
        pin = artifact.sha256[:12] if artifact.sha256 else "UNPINNED"
        source = context.store.sources(artifact)[0]
        print(f"{artifact.name:28} {artifact.version:12} {artifact.role:14} {pin:12} {source}")


def cmd_lock_update(args: argparse.Namespace) -> None:
    from efa_image.artifacts import lock, pin, wheelset

    lock_path = Path(args.lock) if args.lock else lock.default_lock_path()
    # A wheel set is resolved before the lock can parse it (its wheels may not exist yet).
    spec = wheelset.read_spec(lock_path, args.name)
    if spec is not None:
        start = time.monotonic()
        updated = wheelset.update(lock_path, spec, _store(args, allow_unpinned=False))
        state = "changed" if updated.diff else "already pinned"
        sys.stdout.write(updated.diff)
        print(
            f"{updated.name} {updated.version}: {updated.count} wheels resolved, fetched and "
            f"verified, {state} ({time.monotonic() - start:.0f}s)"
        )
        return
    context = _context(args, allow_unpinned=True)
    if wheelset_name := context.lock.get(args.name).wheelset:
        raise EfaImageError(
            f"{args.name} is a file of the wheel set {wheelset_name}, pinned with the set: "
            f"run `efa-image lock update {wheelset_name}`"
        )
    pinned = pin.pin(context.lock, context.store, args.name)
    if not pinned.diff:
        print(f"{pinned.name} {pinned.version}: sha256 {pinned.sha256} already pinned")
    sys.stdout.write(pinned.diff)


def cmd_build(args: argparse.Namespace) -> None:
    from efa_image.building import build, push

    context = _context(args)
    ensure_docker()
    catalog = context.catalog
    flavor = args.flavor or catalog.default_flavor
    request = build.BuildRequest(
        flavor=flavor,
        profile=args.profile or catalog.default_profile,
        base_image=args.base_image or catalog.base_image(flavor),
        repository=args.repository,
        mirror=args.mirror or None,
        overlays=tuple(str(p.resolve()) for p in context.overlays),
        extra_vars=tuple(args.extra_var or ()),
        build_cache=args.build_cache,
        rebuild=args.rebuild,
        detect=not args.no_detect,
    )
    if args.push:
        push.destination(args.push)  # a bad repository stops before the build, not after
    result = build.build(request, context)
    try:
        if args.push:
            result.pushed = push.push(result.image, args.push).digests
    finally:
        if args.report:
            Path(args.report).parent.mkdir(parents=True, exist_ok=True)
            Path(args.report).write_text(result.to_json())
            print(f"report: {args.report}")


def cmd_push(args: argparse.Namespace) -> None:
    from efa_image.building import push

    ensure_docker()
    push.push(args.image, args.repository)


def cmd_verify(args: argparse.Namespace) -> None:
    from efa_image.verification import cluster, containers, multihost, verify

    if args.hostfile:
        path = Path(args.hostfile)
        if not path.is_file():
            raise EfaImageError(f"no hostfile {path}: give a file with one host per line")
        args.across = ",".join(cluster.read_hostfile(path.read_text()))
    wheres = [args.container, args.image, args.across, args.log]
    if args.sbatch:
        print(cluster.sbatch_script(
            args.nodes or 2, args.gpus_per_host or 8, image=args.image,
            max_bytes=args.max_bytes, efa=args.efa != "absent",
        ), end="")  # fmt: skip
        return
    if sum(bool(where) for where in wheres) != 1:
        raise EfaImageError(
            "name what to verify: --container NAME, --image REF, --across HOST,HOST or "
            "--hostfile FILE (hosts over SSH) or --log FILE (a saved all_reduce_perf log)"
        )
    if args.log:
        verify_log(args)
        return
    if args.across:
        verify_across(args)
        return
    ensure_docker()
    with containers.target(args.container, args.image, gpus=args.perf) as run:
        report = verify.verify_efa(run, prefix=args.prefix, version=args.version)
        verify.verify_compat(run, report)
        if args.perf:
            verify.verify_perf(run, report, args.instance_type, args.threshold)
    print(report.to_json() if args.json else report.render())
    if not report.ok:
        raise EfaImageError(f"verification failed ({report.mode} mode)")
    if args.hosts:
        if not args.image:
            raise EfaImageError("--hosts starts containers of an image: give --image")
        job = multihost.run_job(args.image, args.hosts)
        print(job.render())
        if not job.ok:
            raise EfaImageError(f"the MPI job across {args.hosts} containers failed")


def verify_log(args: argparse.Namespace) -> None:
    """Judge an all_reduce_perf log run elsewhere (the --sbatch script's)."""
    from efa_image.verification import cluster, verify

    path = Path(args.log)
    if not path.is_file():
        raise EfaImageError(f"no log {path}: give the file the job wrote (--log FILE)")
    present = args.efa == "present"
    report = verify.Report(
        "log", f"{path}; EFA devices {'declared present' if present else 'not declared'}"
    )
    cluster.judge_nccl_log(
        report,
        path.read_text(errors="replace"),
        nodes=args.nodes or 1,
        instance_type=args.instance_type,
        efa_devices=["declared"] if present else [],
        threshold=args.threshold,
    )
    print(report.to_json() if args.json else report.render())
    if not report.ok:
        raise EfaImageError(f"{path}: the all_reduce_perf run failed verification")


def verify_across(args: argparse.Namespace) -> None:
    """Every host over SSH, then one job across them all, started on the first."""
    from efa_image.verification import cluster, verify

    hosts = [host for host in args.across.split(",") if host]
    if len(hosts) < 2:
        raise EfaImageError("--across needs at least two hosts: HOST,HOST[,...]")
    ssh = cluster.Ssh(args.ssh_user, args.ssh_key, tuple(args.ssh_option), args.ssh_config)
    failed = []
    devices: list[str] = []
    for host in hosts:
        run = ssh.runner(host)
        reached = run("true")
        if reached.rc != 0:
            raise EfaImageError(
                f"cannot reach {host} over SSH ({reached.stderr.strip()[-300:]}): check the "
                "address, --ssh-user and --ssh-key"
            )
        report = verify.verify_efa(run, prefix=args.prefix, version=args.version)
        verify.verify_compat(run, report)
        devices = devices or verify.efa_devices(run)
        print(f"{host}:\n{report.render()}")
        if not report.ok:
            failed.append(host)
    if failed:
        raise EfaImageError(f"verification failed on {', '.join(failed)}")
    if not args.perf:
        job = cluster.mpi_job(ssh, hosts, "efa" if devices else "tcp")
        print(job.render())
        if not job.ok:
            raise EfaImageError(f"the MPI job across {', '.join(hosts)} failed")
        return
    first = ssh.runner(hosts[0])
    per_host = args.gpus_per_host or verify.gpu_count(first)
    if not per_host:
        raise EfaImageError(
            f"--perf needs GPUs, and {hosts[0]} shows none (nvidia-smi): run on GPU hosts, "
            "or leave out --perf for the MPI check"
        )
    report = verify.Report("hardware" if devices else "no-device", f"{len(hosts)} hosts")
    cluster.nccl_job(
        ssh, hosts, report, instance_type=args.instance_type, per_host=per_host,
        efa_devices=devices, threshold=args.threshold, max_bytes=args.max_bytes,
    )  # fmt: skip
    print(report.to_json() if args.json else report.render())
    if not report.ok:
        raise EfaImageError(f"all_reduce_perf across {', '.join(hosts)} failed verification")


def cmd_distribution(args: argparse.Namespace) -> None:
    from efa_image.sagemaker import distribution as dist
    from efa_image.sagemaker import sdk_v2, sdk_v3
    from efa_image.sagemaker import snippets as snippets
    from efa_image.sagemaker.instance_types import instance_type

    itype = instance_type(args.instance_type)
    if args.check and (args.processes_per_host is not None or args.efa is not None):
        raise EfaImageError(
            "--processes-per-host and --efa shape a printed config: drop them "
            "with --check, which reads yours"
        )
    if args.check:
        config = dist.load_config(args.check)
        trap = sdk_v3.check_v3(config) if args.sdk == "v3" else []
        if args.sdk == "v3":
            config = sdk_v3.from_v3(config)
        version = dist.resolve_version(args.library, args.version) if args.version else None
        findings = trap + dist.check(config, itype, args.library, version, args.sdk)
        for finding in findings:
            print(finding.render())
        errors = sum(f.level == "error" for f in findings)
        if errors:
            raise EfaImageError(f"{args.check}: {errors} problem(s) for {itype.name}, see above")
        print(f"{args.check}: ok for {itype.name}")
    else:
        version = dist.resolve_version(args.library, args.version)
        config = dist.recommend(itype, args.library, version, args.processes_per_host, args.efa)
        if args.sdk == "v3":
            print(snippets.render_v3(config, itype, args.library, args.instance_count))
        else:
            print(snippets.render_v2(config, itype, args.library, version))
    if args.hyperparameters:
        if not args.entry_point:
            raise EfaImageError("--hyperparameters needs --entry-point SCRIPT (e.g. train.py)")
        values = sdk_v2.hyperparameters(
            config,
            args.entry_point,
            args.submit_directory,
            instance_type=itype.name,
            job_name=args.job_name,
            region=args.region,
        )
        sdk_v2.write_hyperparameters(args.hyperparameters, values)
        print(f"hyperparameters: {args.hyperparameters} ({len(values)} keys)", file=sys.stderr)


def _artifact_options(parser: argparse.ArgumentParser, selection: bool = True) -> None:
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
        description="Build the named base images with mmdebstrap + docker import, reusing "
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

    build_cmd = sub.add_parser(
        "build",
        help="build an image: base, pre-flight, packer build, verify, tag",
        description="Make sure the base image exists, pre-flight and fetch every artifact "
        "of the flavour and profile, run `packer build` on packer/ (docker source), verify "
        "the result and only then tag it with the flavour, profile and component versions.",
    )
    _artifact_options(build_cmd)
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
        metavar="DIR",
        default=os.environ.get("EFA_IMAGE_BUILD_CACHE", ""),
        help="keep compiled components here and take identical ones back (env "
        "EFA_IMAGE_BUILD_CACHE, default ~/.cache/efa-image/builds; 'off' compiles everything)",
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
        "with the aws CLI); the report lists the pushed digests",
    )
    build_cmd.set_defaults(func=cmd_build)

    push_cmd = sub.add_parser(
        "push",
        help="push a verified image under every tag its build gave it (ECR: logs in)",
        description="Push IMAGE, which must have passed verification in `efa-image build` on "
        "this machine (its fingerprint recorded as verified), to REPOSITORY "
        "(HOST[:PORT]/NAME, no tag) under its flavour-profile and component tags. For an ECR "
        "URI (<account>.dkr.ecr.<region>.amazonaws.com/<name>) it logs in first with `aws ecr "
        "get-login-password`. Prints each pushed tag's digest.",
    )
    push_cmd.add_argument("image", metavar="IMAGE", help="a tag or ID of a verified build")
    push_cmd.add_argument(
        "repository",
        metavar="REPOSITORY",
        help="HOST[:PORT]/NAME, e.g. 123456789012.dkr.ecr.us-east-1.amazonaws.com/efa-image",
    )
    push_cmd.set_defaults(func=cmd_push)

    verify_cmd = sub.add_parser(
        "verify",
        help="verify the EFA userspace in a container or image (knows whether EFA is present)",
        description="Run the EFA checks inside a running container (--container) or a "
        "throw-away container of an image (--image; the host's /dev/infiniband/uverbs* are "
        "passed in). With EFA devices, fi_info must list efa RDM endpoints with "
        "FI_PROTO_EFA; without, the report says so and checks the build instead.",
    )
    where = verify_cmd.add_mutually_exclusive_group()
    where.add_argument("--container", metavar="NAME")
    where.add_argument("--image", metavar="REF")
    where.add_argument(
        "--across",
        metavar="HOST,HOST",
        help="hosts over SSH (AMIs, existing hosts): verify each, then an MPI job across all "
        "(with --perf all_reduce_perf), started on the first; the names are the hosts' own",
    )
    where.add_argument(
        "--hostfile",
        metavar="FILE",
        help="as --across, the hosts from a hostfile (one per line, `h1 slots=8` as mpirun's)",
    )
    where.add_argument(
        "--log",
        metavar="FILE",
        help="judge a saved all_reduce_perf log (NCCL_DEBUG=INFO), e.g. the --sbatch job's",
    )
    verify_cmd.add_argument("--prefix", default="/opt/amazon/efa", help="libfabric prefix")
    verify_cmd.add_argument("--version", help="libfabric version that must be installed")
    verify_cmd.add_argument("--json", action="store_true", help="print the report as JSON")
    verify_cmd.add_argument(
        "--perf",
        action="store_true",
        help="GPU hosts: run all_reduce_perf on every GPU, judge what carried NCCL's traffic "
        "and the bus bandwidth",
    )
    verify_cmd.add_argument(
        "--instance-type",
        default="p5.48xlarge",
        help="with --perf or --log: the floor to compare with (src/efa_image/data/nccl_busbw.yml) "
        "and whether GPUDirect RDMA over EFA is expected",
    )
    verify_cmd.add_argument(
        "--threshold", type=float, metavar="GBPS", help="with --perf: this floor instead"
    )
    verify_cmd.add_argument(
        "--hosts",
        type=int,
        metavar="N",
        help="with --image: also run an MPI allreduce across N containers of it over SSH",
    )
    verify_cmd.add_argument("--ssh-user", help="with --across: the user to connect as")
    verify_cmd.add_argument("--ssh-key", metavar="FILE", help="with --across: its private key")
    verify_cmd.add_argument(
        "--ssh-config",
        metavar="FILE",
        help="with --across: an ssh_config file (Host blocks naming each host's HostName, ...)",
    )
    verify_cmd.add_argument(
        "--ssh-option",
        action="append",
        default=[],
        metavar="OPTION",
        help="with --across: an `ssh -o` option (repeatable), e.g. UserKnownHostsFile=FILE",
    )
    verify_cmd.add_argument(
        "--gpus-per-host", type=int, metavar="N", help="ranks per host (default: its GPUs)"
    )
    verify_cmd.add_argument(
        "--nodes", type=int, metavar="N", help="with --log or --sbatch: the job's node count"
    )
    verify_cmd.add_argument(
        "--efa",
        choices=["auto", "present", "absent"],
        default="auto",
        help="EFA devices: found on the target (auto), or declared for --log and --sbatch",
    )
    verify_cmd.add_argument(
        "--max-bytes", default="8G", help="all_reduce_perf's largest message (default 8G)"
    )
    verify_cmd.add_argument(
        "--sbatch",
        action="store_true",
        help="print the all_reduce_perf check as a Slurm batch script (srun --mpi=pmix; with "
        "--image, pyxis's --container-image) and exit",
    )
    verify_cmd.set_defaults(func=cmd_verify)

    fetch = sub.add_parser(
        "fetch",
        help="check every artifact a build needs, then download and verify it into the cache",
        description="Pre-flight every artifact of the flavour (default: the default flavour "
        "and profile), reporting all missing or unreachable ones at once, then download "
        "what is not cached and verify it by sha256.",
    )
    _artifact_options(fetch)
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
    _artifact_options(create)
    create.set_defaults(func=cmd_mirror_create)

    lock_cmd = sub.add_parser("lock", help="inspect and pin the artifact lock")
    lock_sub = lock_cmd.add_subparsers(dest="lock_command", required=True, metavar="ACTION")
    listing = lock_sub.add_parser("list", help="every artifact with version, role, pin, source")
    _artifact_options(listing, selection=False)
    listing.set_defaults(func=cmd_lock_list)
    update = lock_sub.add_parser(
        "update",
        help="download NAME, compute its sha256 and write it into the lock (shows the diff); "
        "for a wheel set, resolve its dependency closure on its index and pin every wheel",
    )
    update.add_argument("name", metavar="NAME")
    _artifact_options(update, selection=False)
    update.set_defaults(func=cmd_lock_update)

    dist_cmd = sub.add_parser(
        "distribution",
        help="print a checked SageMaker distribution config, or check one (--check FILE)",
        description="Print the SageMaker Python SDK's distribution config (v2: the PyTorch "
        "estimator's distribution= dict; v3: ModelTrainer's distributed=MPI(...)) for an "
        "instance type and library, checked against the traps of AWS's guide; or check a "
        "user's config (JSON or YAML) and print each problem with its fix. --hyperparameters "
        "writes the hyperparameters.json SageMaker derives from the config.",
    )
    dist_cmd.add_argument("--instance-type", required=True, metavar="TYPE", help="ml.p4d.24xlarge")
    dist_cmd.add_argument(
        "--library", required=True, choices=("mpi", "dataparallel", "modelparallel")
    )
    dist_cmd.add_argument(
        "--version",
        metavar="V",
        help="smdistributed version (default: the newest of src/efa_image/data/"
        "smdistributed_builds.yml)",
    )
    dist_cmd.add_argument(
        "--processes-per-host", type=int, metavar="N", help="default: the instance's GPUs"
    )
    dist_cmd.add_argument("--sdk", choices=("v2", "v3"), default="v2", help="default v2")
    dist_cmd.add_argument(
        "--instance-count", type=int, default=2, metavar="N", help="instances (default 2)"
    )
    dist_cmd.add_argument(
        "--efa",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the guide's EFA flags in custom_mpi_options (default: where the type has EFA)",
    )
    dist_cmd.add_argument("--check", metavar="FILE", help="check this config instead")
    dist_cmd.add_argument("--hyperparameters", metavar="OUT", help="write hyperparameters.json")
    dist_cmd.add_argument("--entry-point", metavar="SCRIPT", help="with --hyperparameters")
    dist_cmd.add_argument(
        "--submit-directory",
        metavar="DIR",
        default="/opt/ml/code",
        help="with --hyperparameters: sagemaker_submit_directory (default /opt/ml/code)",
    )
    dist_cmd.add_argument("--job-name", help="with --hyperparameters: sagemaker_job_name")
    dist_cmd.add_argument("--region", help="with --hyperparameters: sagemaker_region")
    dist_cmd.set_defaults(func=cmd_distribution)
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
