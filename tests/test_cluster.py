"""Checks across hosts: the commands, the Slurm script and the judgement of a multi-node log.

The orchestration itself runs in make test: `efa-image verify --across` over SSH
against two provisioned hosts (tests/image/test_hosts.py, the MPI self-check in
place of all_reduce_perf, which needs GPUs) and across two containers of an
image (tests/image/test_image_build.py).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from efa_image.errors import EfaImageError
from efa_image.verification import cluster, multihost, verify
from mpi_lines import OUTPUT, SINGLETONS
from nccl_lines import EFA_LINES

GPU_DATA = Path(__file__).parent / "data" / "gpu"


def test_nccl_mpirun_places_a_rank_per_gpu_and_passes_nccls_environment():
    argv = cluster.nccl_mpirun(["h1", "h2"], 8, efa=True)
    assert argv[:4] == [multihost.MPIRUN, "-np", "16", "--host"]
    assert argv[4] == "h1:8,h2:8"
    exported = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-x"]
    assert exported == ["NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,NET,ENV", "FI_PROVIDER=efa"]
    assert argv[-9:] == [cluster.NCCL_TESTS, "-b", "8", "-e", "8G", "-f", "2", "-g", "1"]
    # Without EFA devices FI_PROVIDER=efa would make NCCL hang: never passed then.
    assert "FI_PROVIDER=efa" not in cluster.nccl_mpirun(["h1", "h2"], 8, efa=False)


def test_ssh_argv_names_config_key_options_and_user():
    ssh = cluster.Ssh("admin", "/k", ("UserKnownHostsFile=/kh",), "/cfg")
    assert ssh.argv("h1") == [
        "ssh", "-F", "/cfg", "-o", "BatchMode=yes", "-i", "/k", "-o", "IdentitiesOnly=yes",
        "-o", "UserKnownHostsFile=/kh", "admin@h1",
    ]  # fmt: skip
    assert cluster.Ssh().argv("h1") == ["ssh", "-o", "BatchMode=yes", "h1"]


def test_enroot_form_of_image_references():
    ecr = "123456789012.dkr.ecr.us-east-1.amazonaws.com/efa-image:efa-aws"
    assert (
        cluster.enroot_image(ecr)
        == "123456789012.dkr.ecr.us-east-1.amazonaws.com#efa-image:efa-aws"
    )
    assert cluster.enroot_image("localhost:5000/efa:x") == "localhost:5000#efa:x"
    assert cluster.enroot_image("nvidia/cuda:12.4.1-devel") == "nvidia/cuda:12.4.1-devel"
    # What `efa-image build` leaves in this daemon, never pushed: pyxis imports it from there.
    assert cluster.enroot_image("efa-image:efa-aws", local=True) == "dockerd://efa-image:efa-aws"


def test_sbatch_script_runs_all_reduce_perf_through_pmix_in_the_image():
    script = cluster.sbatch_script(4, 8, image="123.dkr.ecr.us-west-2.amazonaws.com/efa:x")
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    for directive in ("--nodes=4", "--ntasks-per-node=8", "--gpus-per-node=8", "--exclusive"):
        assert f"#SBATCH {directive}" in lines, directive
    assert "export FI_PROVIDER=efa" in lines and "export NCCL_DEBUG=INFO" in lines
    srun = shlex.split(lines[-1])
    assert srun[:3] == [
        "srun",
        "--mpi=pmix",
        "--container-image=123.dkr.ecr.us-west-2.amazonaws.com#efa:x",
    ]
    assert srun[3:] == [cluster.NCCL_TESTS, "-b", "8", "-e", "8G", "-f", "2", "-g", "1"]
    assert "efa-image verify --log" in script
    # The script is valid bash.
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    # An AMI's hosts run the check without a container; without EFA, no FI_PROVIDER.
    bare = cluster.sbatch_script(2, 4, efa=False)
    assert "--container-image" not in bare and "FI_PROVIDER" not in bare


def test_judging_a_two_node_log_uses_the_multi_node_floor_and_the_network():
    """A log as two p5 nodes over EFA would print it: the H200 log's result rows (0 GB/s: one
    GPU) with the derived EFA lines. The network passes, the busbw floor for 2 nodes fails."""
    log = (GPU_DATA / "h200-all_reduce_perf-plugin-tcp.log").read_text().splitlines()
    rows = "\n".join(line for line in log if " NCCL " not in line) + "\n"
    report = verify.Report("log", "test")
    cluster.judge_nccl_log(
        report, rows + EFA_LINES, nodes=2, instance_type="p5.48xlarge", efa_devices=["uverbs0"]
    )
    checks = {f.check: f for f in report.findings}
    assert checks["nccl-tests"].ok
    assert checks["NCCL network"].ok and "GDR enabled" in checks["NCCL network"].detail
    assert not checks["nccl busbw"].ok and "floor 200 GB/s for p5.48xlarge, 2 node(s)" in (
        checks["nccl busbw"].detail
    )


def test_judging_a_log_that_holds_no_result():
    report = verify.Report("log", "test")
    assert (
        cluster.judge_nccl_log(
            report, "mpirun: bad host\n", nodes=2, instance_type="p5.48xlarge", efa_devices=[]
        )
        is None
    )
    assert not report.ok and "no nccl-tests result rows" in report.findings[0].detail


def efa_image(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "efa_image", "verify", *argv], capture_output=True, text=True
    )


def test_cli_judges_the_h200_log_and_fails_where_efa_is_declared():
    log = str(GPU_DATA / "h200-all_reduce_perf-plugin-tcp.log")
    plain = efa_image("--log", log, "--instance-type", "p5e.48xlarge")
    assert "note NCCL network: tcp provider, GDR disabled, EFA not used" in plain.stdout
    declared = efa_image("--log", log, "--instance-type", "p5e.48xlarge", "--efa", "present")
    assert declared.returncode == 1
    assert "FAIL NCCL network: EFA devices present but aws-ofi-nccl selected the tcp" in (
        declared.stdout
    )


def test_sbatch_script_of_an_image_without_nccl_tests_runs_the_mpi_self_check():
    script = cluster.sbatch_script(
        2, 8, check="mpi", image="efa-image:efa-reduced-portable", image_is_local=True,
        efa=False, output="check-%j.log",
    )  # fmt: skip
    lines = script.splitlines()
    assert "#SBATCH --ntasks-per-node=1" in lines and "#SBATCH --output=check-%j.log" in lines
    assert not any("--gpus-per-node" in line or "NCCL_" in line for line in lines)
    assert "#   efa-image verify --log check-JOBID.log --nodes 2" in lines
    for exported in (
        "OMPI_MCA_mtl=ofi",
        "OMPI_MCA_mtl_ofi_provider_include=tcp",
        "PMIX_MCA_gds=hash",
    ):
        assert f"export {exported}" in lines, exported
    assert "FI_PROVIDER" not in script and "FI_EFA_FORK_SAFE" not in script
    assert shlex.split(lines[-1]) == [
        "srun", "--mpi=pmix", "--container-image=dockerd://efa-image:efa-reduced-portable",
        multihost.CHECK,
    ]  # fmt: skip
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    # On EFA hosts: the efa provider, and libfabric's fork safety as AWS documents it.
    on_efa = cluster.sbatch_script(2, 8, check="mpi").splitlines()
    assert "export FI_PROVIDER=efa" in on_efa and "export FI_EFA_FORK_SAFE=1" in on_efa
    assert "export OMPI_MCA_mtl_ofi_provider_include=efa" in on_efa
    assert "PMIX_MCA_gds" not in "\n".join(on_efa)  # no container
    assert "#   efa-image verify --log efa-image-check-JOBID.log --nodes 2 --efa present" in on_efa


def test_cli_prints_the_sbatch_script_and_refuses_without_a_target():
    printed = efa_image("--sbatch", "--nodes", "2")
    assert printed.returncode == 0 and "#SBATCH --nodes=2" in printed.stdout
    assert cluster.NCCL_TESTS in printed.stdout  # an AMI of the efa flavour
    nothing = efa_image()
    assert nothing.returncode == 1
    assert nothing.stderr.strip().splitlines() == [
        "efa-image: error: name what to verify: --container NAME, --image REF, --across "
        "HOST,HOST or --hostfile FILE (hosts over SSH) or --log FILE (a saved all_reduce_perf log)"
    ]


def test_nccl_job_starts_mpirun_on_the_first_host_and_judges_its_log(monkeypatch):
    """The --across --perf path (HARDWARE) with SSH replaced by a recording fake."""
    log = (GPU_DATA / "h200-all_reduce_perf-plugin-tcp.log").read_text().splitlines()
    rows = "\n".join(line for line in log if " NCCL " not in line) + "\n"
    commands: list[tuple[str, str]] = []

    def runner(self, host):
        def run(command):
            commands.append((host, command))
            if command.startswith("test -x"):
                return verify.Outcome(0, f"{multihost.MPIRUN}\n", "")
            return verify.Outcome(0, rows + EFA_LINES, "")

        return run

    monkeypatch.setattr(cluster.Ssh, "runner", runner)
    report = verify.Report("hardware", "test")
    cluster.nccl_job(
        cluster.Ssh("admin"), ["h1", "h2"], report,
        instance_type="p5.48xlarge", per_host=8, efa_devices=["uverbs0"],
    )  # fmt: skip
    (host, command), *_ = [c for c in commands if "all_reduce_perf" in c[1]]
    assert host == "h1" and "-np 16 --host h1:8,h2:8" in command and "FI_PROVIDER=efa" in command
    checks = {f.check: f.ok for f in report.findings}
    assert checks["nccl-tests"] and checks["NCCL network"] and checks["nccl busbw"] is False


def test_hostfile_names_the_hosts_as_mpirun_reads_them():
    text = "# the job's nodes\nh1 slots=8\n\nh2 slots=8  # second\n  h3\n"
    assert cluster.read_hostfile(text) == ["h1", "h2", "h3"]
    missing = efa_image("--hostfile", "/nonexistent/hosts")
    assert missing.returncode == 1 and "no hostfile /nonexistent/hosts" in missing.stderr


def test_cli_judges_an_mpi_self_check_log_and_fails_singletons_with_the_remedy(tmp_path):
    log = tmp_path / "job.log"
    log.write_text(OUTPUT)
    passed = efa_image("--log", str(log), "--nodes", "2")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "ok   mpi-job" in passed.stdout
    assert "ok   nodes: ranks on 2 hosts, want 2" in passed.stdout
    assert efa_image("--log", str(log), "--nodes", "3").returncode != 0
    log.write_text(SINGLETONS)
    failed = efa_image("--log", str(log), "--nodes", "2")
    assert failed.returncode == 1
    assert failed.stderr.strip().splitlines() == [
        f"efa-image: error: {log}: 2 ranks each in a world of 1: the launcher started 2 "
        "singletons, not one job; with Slurm start them with `srun --mpi=pmix` (PMIx from Slurm)"
    ]


@pytest.fixture
def docker_answering(monkeypatch, tmp_path):
    """A stand-in `docker` on PATH that prints and exits as told (generic command mechanics:
    no engine is reached)."""

    def install(stdout: str, stderr: str = "", rc: int = 0) -> None:
        fake = tmp_path / "docker"
        fake.write_text(f"#!/bin/sh\nprintf '{stdout}'\nprintf '{stderr}' >&2\nexit {rc}\n")
        fake.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")

    return install


def test_the_checks_an_image_holds_decide_the_script(docker_answering):
    docker_answering("mpi\n")
    assert cluster.image_checks("efa-image:efa-reduced-portable") == ["mpi"]
    docker_answering("mpi\nnccl\n")
    assert cluster.image_checks("efa-image:efa-aws") == ["nccl", "mpi"]


def test_an_image_that_is_not_here_is_refused_in_one_line(docker_answering):
    docker_answering("", "docker: Error response from daemon: No such image: x:y.\n", 125)
    with pytest.raises(EfaImageError) as caught:
        cluster.image_checks("x:y")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("cannot look into x:y (docker: Error")
    assert message.endswith("pull or build it here first")
