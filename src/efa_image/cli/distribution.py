"""`efa-image distribution`: SageMaker's distribution config, printed or checked."""

from __future__ import annotations

import argparse
import sys

from efa_image.errors import EfaImageError


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


def add_parsers(sub: argparse._SubParsersAction) -> None:
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
