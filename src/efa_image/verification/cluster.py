"""Checks across the hosts of a cluster: over SSH from here, or as a Slurm batch script.

For AMIs and existing hosts (provisioned in host mode): every host is verified
over SSH (the EFA userspace, the image manifest's compatibility rules), then
one job runs across all of them with `mpirun`, started on the first host: the
image's MPI self-check through the OFI MTL, or all_reduce_perf with NCCL's and
libfabric's environment, judged on what NCCL said (efa_image.verification.nccl_log) and on
the multi-node bandwidth floors. Where jobs go through Slurm (ParallelCluster,
with pyxis and enroot for containers), `sbatch_script` writes the same
all_reduce_perf run as a batch script; `efa-image verify --log` judges its output.
"""

from __future__ import annotations

import shlex
import subprocess
from dataclasses import dataclass

from efa_image.errors import EfaImageError
from efa_image.verification import multihost, nccl_log, nccl_tests, verify

NCCL_TESTS = "/opt/nccl-tests/bin/all_reduce_perf"
# What NCCL must print for the verdict (efa_image.verification.verify.NCCL_DEBUG), for every rank.
NCCL_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,ENV"}
SSH_TIMEOUT = 1800.0


@dataclass(frozen=True)
class Ssh:
    """How this machine reaches the hosts: user, key, an ssh_config file (per-host
    addresses) and extra `ssh -o` options."""

    user: str | None = None
    key: str | None = None
    options: tuple[str, ...] = ()
    config: str | None = None

    def argv(self, host: str) -> list[str]:
        argv = ["ssh", *(["-F", self.config] if self.config else []), "-o", "BatchMode=yes"]
        argv += ["-i", self.key, "-o", "IdentitiesOnly=yes"] if self.key else []
        for option in self.options:
            argv += ["-o", option]
        return [*argv, f"{self.user}@{host}" if self.user else host]

    def runner(self, host: str) -> verify.Run:
        """A verify.Run over SSH: the command in a non-interactive shell of the host."""

        def run(command: str) -> verify.Outcome:
            try:
                proc = subprocess.run(
                    [*self.argv(host), command],
                    capture_output=True,
                    text=True,
                    timeout=SSH_TIMEOUT,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                return verify.Outcome(124, "", f"ssh {host}: no answer in {SSH_TIMEOUT:.0f}s")
            return verify.Outcome(proc.returncode, proc.stdout, proc.stderr)

        return run


def read_hostfile(text: str) -> list[str]:
    """Host names of an Open MPI or Slurm-style hostfile: the first word of each line
    (`h1 slots=8`), comments and blank lines skipped."""
    hosts = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            hosts.append(words[0])
    return hosts


def nccl_mpirun(
    hosts: list[str],
    per_host: int,
    efa: bool,
    max_bytes: str = "8G",
    mpirun: str = multihost.MPIRUN,
) -> list[str]:
    """all_reduce_perf with one rank per GPU on every host. MPI carries only NCCL's
    bootstrap (ob1 over TCP); FI_PROVIDER=efa only where the hosts have EFA devices
    (never baked into an image: without EFA it makes NCCL hang)."""
    env = {**NCCL_ENV, **({"FI_PROVIDER": "efa"} if efa else {})}
    argv = [mpirun, "-np", str(len(hosts) * per_host)]
    argv += ["--host", ",".join(f"{host}:{per_host}" for host in hosts), "--bind-to", "none"]
    argv += ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self"]
    for name, value in env.items():
        argv += ["-x", f"{name}={value}"]
    return [*argv, NCCL_TESTS, "-b", "8", "-e", max_bytes, "-f", "2", "-g", "1"]


def host_mpirun(run: verify.Run) -> str:
    """The mpirun of the roles' Open MPI: the source builds' and the EFA installer's, else
    the one on PATH (the distribution's). A non-interactive shell has no login PATH, so the
    path is absolute, which also gives Open MPI its prefix for the other hosts."""
    found = run(f"test -x {multihost.MPIRUN} && echo {multihost.MPIRUN} || command -v mpirun")
    path = found.stdout.strip()
    return path if found.rc == 0 and path.startswith("/") else multihost.MPIRUN


def mpi_job(ssh: Ssh, hosts: list[str], provider: str) -> multihost.JobResult:
    """The image's MPI self-check across the hosts, one rank each, started on the first."""
    first = ssh.runner(hosts[0])
    argv = multihost.mpirun_command(hosts, provider, host_mpirun(first))
    proc = first(shlex.join(argv))
    return multihost.job_result(
        hosts, provider, shlex.join(argv), proc.rc, proc.stdout + proc.stderr
    )


def judge_nccl_log(
    report: verify.Report,
    text: str,
    *,
    nodes: int,
    instance_type: str,
    efa_devices: list[str],
    threshold: float | None = None,
    rc: int = 0,
) -> nccl_tests.PerfRun | None:
    """An all_reduce_perf log across `nodes` hosts: results, what carried the traffic, busbw."""
    try:
        result = nccl_tests.parse(text)
    except nccl_tests.ParseError as exc:
        report.add("nccl-tests", False, str(exc))
        return None
    report.add(
        "nccl-tests",
        rc == 0 and result.ok,
        f"all_reduce_perf on {len(result.devices)} ranks, {len(result.hostnames)} hosts: "
        f"{len(result.rows)} sizes, out of bounds {result.out_of_bounds}",
    )
    facts = nccl_log.parse(text)
    gdr = verify.gdr_over_efa(instance_type)
    report.findings.extend(verify.network_findings(facts, efa_devices, gdr))
    thresholds = {instance_type: threshold} if threshold is not None else None
    report.findings.append(nccl_tests.check_bandwidth(result, instance_type, thresholds, nodes))
    return result


def is_mpi_check_log(text: str) -> bool:
    """The MPI self-check's output (its rank lines), not all_reduce_perf's."""
    ranks, _ = multihost.parse(text)
    return bool(ranks) and "all_reduce_perf" not in text and "#  Rank" not in text


def judge_mpi_log(
    report: verify.Report, text: str, *, nodes: int | None, efa: bool
) -> multihost.JobResult:
    """The MPI self-check's log from a job started elsewhere (srun): one job of every rank
    that printed (not N singletons), on `nodes` hosts, through the OFI MTL on efa (declared)
    or tcp."""
    ranks, _ = multihost.parse(text)
    hosts = sorted({rank.host for rank in ranks})
    job = multihost.job_result(hosts, "efa" if efa else "tcp", "(log)", 0, text, len(ranks))
    report.add("mpi-job", job.ok, job.render().replace("\n", "\n    "))
    if nodes is not None:
        report.add("nodes", len(hosts) == nodes, f"ranks on {len(hosts)} hosts, want {nodes}")
    return job


def nccl_job(
    ssh: Ssh,
    hosts: list[str],
    report: verify.Report,
    *,
    instance_type: str,
    per_host: int,
    efa_devices: list[str],
    threshold: float | None = None,
    max_bytes: str = "8G",
) -> nccl_tests.PerfRun | None:
    """HARDWARE: all_reduce_perf across the hosts over EFA, judged (judge_nccl_log)."""
    first = ssh.runner(hosts[0])
    argv = nccl_mpirun(hosts, per_host, bool(efa_devices), max_bytes, host_mpirun(first))
    proc = first(shlex.join(argv))
    return judge_nccl_log(
        report,
        proc.stdout + proc.stderr,
        nodes=len(hosts),
        instance_type=instance_type,
        efa_devices=efa_devices,
        threshold=threshold,
        rc=proc.rc,
    )


def enroot_image(reference: str, local: bool = False) -> str:
    """pyxis/enroot's form of an image reference: the registry host, then '#'
    (123.dkr.ecr.us-east-1.amazonaws.com#efa-image:efa-aws); an image that only a Docker
    daemon holds (local: built here, never pushed or pulled) is imported from the node's
    daemon (dockerd://efa-image:efa-aws); other names stay as they are (Docker Hub)."""
    first, sep, rest = reference.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return f"dockerd://{reference}" if local else reference


# What a batch script can run, by what the image or host holds.
CHECKS = {"nccl": NCCL_TESTS, "mpi": multihost.CHECK}
# Open MPI's OFI MTL on the provider, saying which it selected (as multihost.mpirun_command).
MPI_ENV = {
    "OMPI_MCA_pml": "cm",
    "OMPI_MCA_mtl": "ofi",
    "OMPI_MCA_mtl_base_verbose": "10",
    "OMPI_MCA_mtl_ofi_verbose": "1",
}


def image_checks(image: str) -> list[str]:
    """The checks whose program the image holds (nccl first), looked for in a container of it."""
    probe = "; ".join(f"test -x {path} && echo {name}" for name, path in CHECKS.items())
    proc = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--pull=never",
            "--entrypoint",
            "sh",
            image,
            "-c",
            probe + "; true",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        said = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise EfaImageError(
            f"cannot look into {image} ({said}): the script must name what the image holds; "
            "pull or build it here first"
        )
    return [name for name in CHECKS if name in proc.stdout.split()]


def sbatch_script(
    nodes: int,
    gpus_per_node: int,
    *,
    check: str = "nccl",
    image: str | None = None,
    image_is_local: bool = False,
    max_bytes: str = "8G",
    efa: bool = True,
    output: str = "efa-image-check-%j.log",
) -> str:
    """The check as a Slurm batch script: srun's PMIx launcher starts the ranks; with an
    image, pyxis runs each in a container of it. check nccl: all_reduce_perf on every GPU;
    mpi: the MPI self-check, one rank per node, through the OFI MTL."""
    provider = "efa" if efa else "tcp"
    env = {"FI_EFA_FORK_SAFE": "1", "FI_PROVIDER": "efa"} if efa else {}
    if check == "nccl":
        env |= NCCL_ENV
        tasks, argv = gpus_per_node, [NCCL_TESTS, "-b", "8", "-e", max_bytes, "-f", "2", "-g", "1"]
        judge = f"--nodes {nodes} --instance-type TYPE"
    else:
        env |= {**MPI_ENV, "OMPI_MCA_mtl_ofi_provider_include": provider}
        tasks, argv = 1, [multihost.CHECK]
        judge = f"--nodes {nodes}" + (" --efa present" if efa else "")
    srun = ["srun", "--mpi=pmix"]
    if image:
        # enroot's PMIx hook hands Slurm's PMIx to the container; AWS's recipes pair it with
        # the hash store (PMIx's shared-memory store needs what the container does not share).
        env["PMIX_MCA_gds"] = "hash"
        srun += [f"--container-image={enroot_image(image, image_is_local)}"]
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=efa-image-{check}-check",
        f"#SBATCH --nodes={nodes}",
        f"#SBATCH --ntasks-per-node={tasks}",
        *([f"#SBATCH --gpus-per-node={gpus_per_node}"] if check == "nccl" else []),
        "#SBATCH --exclusive",
        f"#SBATCH --output={output}",
        "# Judge the log (%j: the job ID) with:",
        f"#   efa-image verify --log {output.replace('%j', 'JOBID')} {judge}",
        "set -euo pipefail",
        *(f"export {name}={shlex.quote(value)}" for name, value in env.items()),
        shlex.join([*srun, *argv]),
    ]
    return "\n".join(lines) + "\n"
