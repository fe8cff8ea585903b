from efa_image.verification import multihost
from mpi_lines import OUTPUT, SINGLETONS


def result(output, rc=0, hosts=("efa-mpi-1", "efa-mpi-2")):
    return multihost.job_result(list(hosts), "tcp", "mpirun", rc, output)


def test_both_hosts_and_the_ofi_mtl_make_a_good_job():
    job = result(OUTPUT)
    assert [r.rank for r in job.ranks] == [0, 1]
    assert job.hosts_seen == {"efa-mpi-1", "efa-mpi-2"}
    assert job.ofi_selected == 2
    assert job.ok
    assert "ok: hosts efa-mpi-1, efa-mpi-2" in job.render()


def test_one_host_missing_a_wrong_sum_or_another_mtl_fail():
    one_host = OUTPUT.replace("on efa-mpi-2", "on efa-mpi-1")
    assert not result(one_host).ok
    assert not result(OUTPUT.replace("sum 3 expected", "sum 2 expected")).ok
    assert not result(OUTPUT.replace("Selected component [ofi]", "Selected component [psm2]")).ok
    assert not result(OUTPUT, rc=1).ok
    # The OFI MTL on another provider than the one asked for (or naming none) is no pass.
    assert not result(OUTPUT.replace("provider: tcp", "provider: shm")).ok
    assert not result(OUTPUT.replace("mtl:ofi:provider: tcp", "")).ok
    assert "FAILED" in result(OUTPUT, rc=1).render()


def test_mpirun_command_places_one_rank_per_host_through_the_provider():
    argv = multihost.mpirun_command(["a", "b"], "tcp")
    assert argv[:5] == [multihost.MPIRUN, "-np", "2", "--host", "a:1,b:1"]
    assert argv[argv.index("mtl_ofi_provider_include") + 1] == "tcp"
    assert argv[-1] == multihost.CHECK


def test_n_singletons_are_not_one_job_and_the_remedy_is_named():
    job = result(SINGLETONS, hosts=("c1", "c2"))
    assert job.singletons and not job.ok
    assert "2 ranks each in a world of 1" in job.render()
    assert "srun --mpi=pmix" in job.render()
    good = result(OUTPUT)
    assert not good.singletons


def test_a_world_of_more_ranks_than_hosts_needs_every_rank():
    two_per_host = OUTPUT.replace("of 2", "of 4")
    assert not result(two_per_host).ok  # ranks 2 and 3 never reported
    job = multihost.job_result(["efa-mpi-1", "efa-mpi-2"], "tcp", "srun", 0, OUTPUT, world=4)
    assert job.expected == 4 and not job.ok
