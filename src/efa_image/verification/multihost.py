"""An MPI job across containers of one image: the local stand-in for a multi-node job.

Starts N containers of the image on their own Docker network, each running the
image's sshd (role mpi_ssh), and runs the image's MPI self-check (role openmpi,
/opt/efa-image/bin/mpi_allreduce_check) from the first one with `mpirun` over
SSH. Without EFA devices the OFI MTL is pointed at libfabric's tcp provider
(Open MPI excludes tcp from the OFI MTL by default); with devices, at efa.
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from efa_image.errors import EfaImageError
from efa_image.runner import run_command
from efa_image.verification.containers import efa_device_args

# The EFA installer's and the source builds' mpirun; the image's PATH names
# another (the distribution's /usr/bin/mpirun) where the openmpi role put it there.
MPIRUN = "/opt/amazon/openmpi/bin/mpirun"
CHECK = "/opt/efa-image/bin/mpi_allreduce_check"
RANK_LINE = re.compile(r"^rank (\d+) of (\d+) on (\S+): sum (-?\d+) expected (-?\d+)$")
SELECTED_OFI = re.compile(r"\(\s*mtl\) Selected component \[ofi\]")
# The OFI MTL names the libfabric provider it opened (mtl_ofi_verbose), once per rank.
OFI_PROVIDER = re.compile(r"mtl:ofi:provider: (\S+)$", re.MULTILINE)
LABEL = "org.efa-image.test=multihost"


@dataclass(frozen=True)
class Rank:
    rank: int
    size: int
    host: str
    total: int
    expected: int


@dataclass
class JobResult:
    hosts: list[str]
    provider: str
    command: str
    rc: int
    output: str
    ranks: list[Rank] = field(default_factory=list)
    ofi_selected: int = 0
    # The ranks the job should have (default: one per host).
    world: int = 0

    @property
    def expected(self) -> int:
        return self.world or len(self.hosts)

    @property
    def singletons(self) -> bool:
        """Every rank alone in a world of 1: the launcher started N processes that never
        met (srun without --mpi=pmix), not one job."""
        return len(self.ranks) > 1 and all(rank.size == 1 for rank in self.ranks)

    @property
    def providers(self) -> list[str]:
        """The provider each rank's OFI MTL opened."""
        return OFI_PROVIDER.findall(self.output)

    @property
    def hosts_seen(self) -> set[str]:
        return {rank.host for rank in self.ranks}

    @property
    def ok(self) -> bool:
        return (
            self.rc == 0
            and sorted(rank.rank for rank in self.ranks) == list(range(self.expected))
            and all(rank.size == self.expected for rank in self.ranks)
            and all(rank.total == rank.expected for rank in self.ranks)
            and self.hosts_seen == set(self.hosts)
            and self.ofi_selected == self.expected
            and self.providers == [self.provider] * self.expected
        )

    def render(self) -> str:
        lines = [f"MPI allreduce on {len(self.hosts)} hosts through the OFI MTL ({self.provider})"]
        lines += [
            f"  rank {r.rank} on {r.host}: sum {r.total}, want {r.expected} (world of {r.size})"
            for r in self.ranks
        ]
        if self.singletons:
            lines.append(f"  FAILED: {SINGLETONS.format(count=len(self.ranks))}")
        seen = ", ".join(sorted(self.hosts_seen)) or "none"
        lines.append(
            f"  {'ok' if self.ok else 'FAILED'}: hosts {seen}"
            f" of {', '.join(self.hosts)}; OFI MTL selected by {self.ofi_selected} ranks,"
            f" providers {', '.join(self.providers) or 'none named'};"
            f" mpirun exit {self.rc}"
        )
        if not self.ok:
            lines.append(
                "  output:\n" + "\n".join(f"    {x}" for x in self.output.splitlines()[-30:])
            )
        return "\n".join(lines)


SINGLETONS = (
    "{count} ranks each in a world of 1: the launcher started {count} singletons, not one "
    "job; with Slurm start them with `srun --mpi=pmix` (PMIx from Slurm)"
)


def parse(output: str) -> tuple[list[Rank], int]:
    ranks = []
    for line in output.splitlines():
        if match := RANK_LINE.match(line.strip()):
            rank, size, host, total, expected = match.groups()
            ranks.append(Rank(int(rank), int(size), host, int(total), int(expected)))
    return sorted(ranks, key=lambda r: r.rank), len(SELECTED_OFI.findall(output))


def job_result(
    hosts: list[str], provider: str, command: str, rc: int, output: str, world: int = 0
) -> JobResult:
    """The job's result from the launcher's exit status and output (every rank's line, the
    MTL's); world: the ranks it should have, where not one per host."""
    ranks, selected = parse(output)
    return JobResult(hosts, provider, command, rc, output, ranks, selected, world)


def mpirun_command(hosts: list[str], provider: str, mpirun: str = MPIRUN) -> list[str]:
    """One rank per host; verbose MTL selection and OFI MTL, so the report shows the OFI MTL
    was used and which provider it opened."""
    return [
        mpirun,
        "-np",
        str(len(hosts)),
        "--host",
        ",".join(f"{host}:1" for host in hosts),
        "--mca",
        "pml",
        "cm",
        "--mca",
        "mtl",
        "ofi",
        "--mca",
        "mtl_ofi_provider_include",
        provider,
        "--mca",
        "mtl_base_verbose",
        "10",
        "--mca",
        "mtl_ofi_verbose",
        "1",
        CHECK,
    ]


@contextmanager
def cluster(image: str, count: int) -> Iterator[list[str]]:
    """N containers of the image running sshd on a network of their own; removed afterwards."""
    job = uuid.uuid4().hex[:8]
    network = f"efa-image-mpi-{job}"
    hosts = [f"efa-mpi-{job}-{i}" for i in range(1, count + 1)]
    # HARDWARE: on an EFA instance every container gets the devices, as a job's nodes would.
    devices = efa_device_args()
    run_command(["docker", "network", "create", "--label", LABEL, network])
    try:
        for host in hosts:
            where = ["--name", host, "--hostname", host, "--network", network, "--label", LABEL]
            sshd = ["/usr/sbin/sshd", "-D", "-e"]
            run_command(["docker", "run", "-d", "--rm", *where, *devices, image, *sshd])
        wait_for_ssh(hosts)
        yield hosts
    finally:
        subprocess.run(["docker", "rm", "-f", *hosts], capture_output=True, check=False)
        subprocess.run(["docker", "network", "rm", network], capture_output=True, check=False)


def wait_for_ssh(hosts: list[str], timeout: float = 30.0) -> None:
    """The first host must reach every host (itself included) as root, without prompts."""
    deadline = time.monotonic() + timeout
    for host in hosts:
        while True:
            proc = docker_exec(hosts[0], ["ssh", host, "true"])
            if proc.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise EfaImageError(
                    f"{hosts[0]} cannot reach {host} over SSH within {timeout:.0f}s: "
                    f"{(proc.stdout + proc.stderr).strip()[-500:]}"
                )
            time.sleep(0.5)


def docker_exec(container: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", "exec", container, *argv], capture_output=True, text=True, check=False
    )


def image_mpirun(container: str) -> str:
    """The absolute path of the image's mpirun (an absolute one also sets Open MPI's prefix)."""
    found = docker_exec(container, ["sh", "-c", "command -v mpirun"])
    path = found.stdout.strip()
    return path if found.returncode == 0 and path.startswith("/") else MPIRUN


def run_job(image: str, count: int = 2, provider: str | None = None) -> JobResult:
    provider = provider or ("efa" if efa_device_args() else "tcp")
    with cluster(image, count) as hosts:
        argv = mpirun_command(hosts, provider, image_mpirun(hosts[0]))
        proc = docker_exec(hosts[0], argv)
        return job_result(
            hosts, provider, " ".join(argv), proc.returncode, proc.stdout + proc.stderr
        )
