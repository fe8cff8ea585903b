"""The training toolkit and mpi4py on Debian 12's Open MPI 5, after the toolchain left."""

import json
import shlex

from efa_image.artifacts import context

LOCK = context.role_lock()
TOOLKIT = LOCK.get("sagemaker_training/sagemaker-training")
MPI4PY = LOCK.get("sagemaker_training/mpi4py")
VENV = "/opt/efa-image/venv"
PYTHON = f"{VENV}/bin/python"
PREFIX = "/opt/amazon/openmpi"


def python(host, script, env=""):
    return host.run(f"{env} {PYTHON} -c {shlex.quote(script)}")


def test_train_is_the_toolkits_entry_point(host):
    train = host.file(f"{VENV}/bin/train")
    assert train.is_file and train.mode & 0o111
    assert train.content_string.splitlines()[0] == f"#!{PYTHON}"
    out = python(
        host,
        "import importlib.metadata as m\n"
        "found = m.entry_points(group='console_scripts', name='train')\n"
        "print([(e.value, e.dist.name) for e in found])",
    )
    assert out.rc == 0, out.stderr
    assert out.stdout.strip() in (
        "[('sagemaker_training.cli.train:main', 'sagemaker_training')]",
        "[('sagemaker_training.cli.train:main', 'sagemaker-training')]",
    )


def test_the_pinned_toolkit_and_mpi4py_import(host):
    out = python(
        host,
        "import json, sagemaker_training, gethostname, mpi4py, paramiko\n"
        "from importlib.metadata import version\n"
        "print(json.dumps([version('sagemaker-training'), mpi4py.__version__]))",
    )
    assert out.rc == 0, out.stderr
    assert json.loads(out.stdout) == [TOOLKIT.version, MPI4PY.version]


def test_mpi4py_runs_on_the_images_open_mpi(host):
    # "mpicc: Open MPI 5.0.7 (Language: C)"
    version = host.check_output(f"{PREFIX}/bin/mpicc --showme:version").split()[3]
    assert version.startswith("5.")
    out = python(host, "from mpi4py import MPI; print(MPI.Get_library_version())")
    assert out.rc == 0, out.stderr
    assert out.stdout.startswith(f"Open MPI v{version},"), out.stdout
    libmpi = host.check_output(
        f"ldd $({PYTHON} -c 'import mpi4py.MPI as m; print(m.__file__)') | grep libmpi"
    )
    assert f"{PREFIX}/lib" in libmpi and "not found" not in libmpi


def test_mpi4py_ranks_run_under_the_images_mpirun(host):
    script = "from mpi4py import MPI; c = MPI.COMM_WORLD; print('rank', c.rank, 'of', c.size)"
    out = host.run(
        f"{PREFIX}/bin/mpirun --allow-run-as-root -np 2 {PYTHON} -m mpi4py -c {shlex.quote(script)}"
    )
    assert out.rc == 0, out.stdout + out.stderr
    assert sorted(line for line in out.stdout.splitlines() if line.startswith("rank")) == [
        "rank 0 of 2",
        "rank 1 of 2",
    ]


def test_gethostname_preload_answers_sagemakers_host_name(host):
    """The toolkit's LD_PRELOAD: gethostname() returns resourceconfig.json's current_host."""
    config = "/opt/ml/input/config/resourceconfig.json"
    host.check_output(
        f"printf '%s' {shlex.quote(json.dumps({'current_host': 'algo-7', 'hosts': ['algo-7']}))}"
        f" > {config}"
    )
    try:
        so = python(host, "import gethostname; print(gethostname.__file__)").stdout.strip()
        out = python(host, "import socket; print(socket.gethostname())", env=f"LD_PRELOAD={so}")
        assert out.rc == 0 and out.stdout.strip() == "algo-7", out.stdout + out.stderr
        plain = python(host, "import socket; print(socket.gethostname())")
        assert plain.stdout.strip() != "algo-7"
    finally:
        host.run(f"rm -f {config}")


def test_sagemakers_layout_and_environment(host):
    for directory in ("code", "input/config", "input/data", "model", "output"):
        assert host.file(f"/opt/ml/{directory}").is_directory
    described = json.loads(host.file("/opt/efa-image/env.d/60-sagemaker-training.json").content)
    assert described == {
        "path": ["/opt/ml/code"],
        "env": {"SAGEMAKER_SUBMIT_DIRECTORY": "/opt/ml/code"},
    }
    login = host.run("bash -lc 'echo $SAGEMAKER_SUBMIT_DIRECTORY:$PATH'").stdout
    assert login.startswith("/opt/ml/code:") and ":/opt/ml/code" in login


def test_open_mpi_5_launches_its_daemon_as_orted(host):
    """The toolkit's workers wait for a process named orted; Open MPI 5's is prted."""
    orted = host.file(f"{PREFIX}/bin/orted")
    assert orted.is_symlink and orted.linked_to == f"{PREFIX}/bin/prted"
    params = host.file(f"{PREFIX}/etc/prte-mca-params.conf").content_string
    assert f"prte_launch_agent = {PREFIX}/bin/orted" in params
    # PRRTE takes it: its own parameter listing shows the value.
    info = " ".join(host.check_output(f"{PREFIX}/bin/prte_info --all").split())
    assert f'"prte_launch_agent" (current value: "{PREFIX}/bin/orted"' in info


def test_train_runs_a_script_as_sagemaker_does(host):
    """One host, no MPI: the toolkit runs sagemaker_program from /opt/ml/code. The
    host is the container's own name: the toolkit resolves every host by DNS first."""
    config = "/opt/ml/input/config"
    hyper = {"sagemaker_program": '"hello.py"', "sagemaker_submit_directory": '"/opt/ml/code"'}
    name = host.check_output("hostname")
    resource = {"current_host": name, "hosts": [name], "network_interface_name": "eth0"}
    script = "open('/opt/ml/model/hello.txt', 'w').write('hello')\n"
    host.check_output(
        f"printf '%s' {shlex.quote(json.dumps(hyper))} > {config}/hyperparameters.json && "
        f"printf '%s' {shlex.quote(json.dumps(resource))} > {config}/resourceconfig.json && "
        f"echo '{{}}' > {config}/inputdataconfig.json && "
        f"printf '%s' {shlex.quote(script)} > /opt/ml/code/hello.py"
    )
    try:
        out = host.run(
            f"cd / && PATH={VENV}/bin:$PATH SAGEMAKER_SUBMIT_DIRECTORY=/opt/ml/code"
            " timeout 120 train"
        )
        assert out.rc == 0, out.stdout[-2000:] + out.stderr[-2000:]
        assert host.file("/opt/ml/model/hello.txt").content_string == "hello"
        assert host.file("/opt/ml/output/success").exists
    finally:
        host.run(
            f"rm -f {config}/*.json /opt/ml/code/hello.py /opt/ml/model/hello.txt /opt/ml/output/*"
        )


def test_the_toolchain_and_python_headers_are_gone(host):
    assert not host.exists("gcc") and not host.exists("cc")
    assert not host.package("python3-dev").is_installed
