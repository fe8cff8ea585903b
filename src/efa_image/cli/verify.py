"""`efa-image verify`: a container, an image, hosts over SSH, or a saved log."""

from __future__ import annotations

import argparse
from pathlib import Path

from efa_image.errors import EfaImageError
from efa_image.setup.engine import ensure_docker


def cmd_verify(args: argparse.Namespace) -> None:
    from efa_image.verification import cluster, containers, multihost, verify

    if args.hostfile:
        path = Path(args.hostfile)
        if not path.is_file():
            raise EfaImageError(f"no hostfile {path}: give a file with one host per line")
        args.across = ",".join(cluster.read_hostfile(path.read_text()))
    wheres = [args.container, args.image, args.across, args.log]
    if args.sbatch:
        print_sbatch(args)
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
        verify.verify_gdrcopy(run, report)
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


def print_sbatch(args: argparse.Namespace) -> None:
    """The check the image (or, without one, an AMI of the efa flavour) holds, as a batch script."""
    from efa_image.building import images
    from efa_image.verification import cluster

    check, local = args.check or "nccl", False
    if args.image:
        ensure_docker()
        held = cluster.image_checks(args.image)
        if not held:
            raise EfaImageError(
                f"{args.image} holds neither {cluster.NCCL_TESTS} nor {cluster.CHECKS['mpi']}: "
                "build a flavour with nccl-tests or Open MPI (efa, efa-reduced)"
            )
        if args.check and args.check not in held:
            raise EfaImageError(
                f"{args.image} has no {cluster.CHECKS[args.check]} for --check {args.check}"
            )
        check = args.check or held[0]
        local = not images.repo_digests(args.image)
    print(cluster.sbatch_script(
        args.nodes or 2, args.gpus_per_host or 8, check=check, image=args.image,
        image_is_local=local, max_bytes=args.max_bytes, efa=args.efa != "absent",
        output=args.output,
    ), end="")  # fmt: skip


def verify_log(args: argparse.Namespace) -> None:
    """Judge a log of a check run elsewhere (the --sbatch script's): all_reduce_perf's, or
    the MPI self-check's."""
    from efa_image.verification import cluster, multihost, verify

    path = Path(args.log)
    if not path.is_file():
        raise EfaImageError(f"no log {path}: give the file the job wrote (--log FILE)")
    present = args.efa == "present"
    report = verify.Report(
        "log", f"{path}; EFA devices {'declared present' if present else 'not declared'}"
    )
    text = path.read_text(errors="replace")
    if cluster.is_mpi_check_log(text):
        job = cluster.judge_mpi_log(report, text, nodes=args.nodes, efa=present)
        print(report.to_json() if args.json else report.render())
        if job.singletons:
            raise EfaImageError(f"{path}: {multihost.SINGLETONS.format(count=len(job.ranks))}")
        if not report.ok:
            raise EfaImageError(f"{path}: the MPI self-check failed verification")
        return
    cluster.judge_nccl_log(
        report,
        text,
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
        verify.verify_gdrcopy(run, report)
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


def add_parsers(sub: argparse._SubParsersAction) -> None:
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
        help="print the check as a Slurm batch script (srun --mpi=pmix; with --image, pyxis's "
        "--container-image, and the check the image holds) and exit",
    )
    verify_cmd.add_argument(
        "--check",
        choices=["mpi", "nccl"],  # cluster.CHECKS
        help="with --sbatch: nccl (all_reduce_perf on every GPU) or mpi (the MPI self-check, "
        "one rank per node); default: nccl where the image holds it, else mpi",
    )
    verify_cmd.add_argument(
        "--output",
        default="efa-image-check-%j.log",
        help="with --sbatch: the job's log (sbatch --output), which `verify --log` judges",
    )
    verify_cmd.set_defaults(func=cmd_verify)
