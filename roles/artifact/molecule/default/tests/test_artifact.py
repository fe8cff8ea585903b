"""Files and wheels from the CI mirror, on the target, verified against the lock."""

import pytest

from efa_image.artifacts import context

LOCK = context.role_lock()
VENV = "/opt/efa-image/venv"


@pytest.mark.parametrize("name", ["libfabric", "metis"])
def test_file_on_target_matches_the_lock(host, name):
    artifact = LOCK.get(name)
    placed = host.file(f"/var/tmp/efa-image-build/artifacts/{artifact.filename}")
    assert placed.exists and placed.user == "root" and placed.mode == 0o644
    assert placed.sha256sum == artifact.sha256


def test_requirements_pin_every_wheel_by_hash(host):
    wheel = LOCK.get("nccl_wheel")
    lines = [
        line
        for line in host.file(
            "/var/tmp/efa-image-build/wheelhouse/requirements.txt"
        ).content_string.splitlines()
        if line and not line.startswith("#")
    ]
    assert lines == [f"nvidia_nccl_cu12=={wheel.version} --hash=sha256:{wheel.sha256}"]


def test_wheel_installed_in_the_virtualenv(host):
    wheel = LOCK.get("nccl_wheel")
    show = host.check_output(f"{VENV}/bin/python -m pip show nvidia-nccl-cu12")
    assert f"Version: {wheel.version}" in show.splitlines()
    library = host.run(
        f"{VENV}/bin/python -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])'"
    )
    assert library.rc == 0, library.stderr
    assert host.file(f"{library.stdout.strip()}/lib/libnccl.so.2").exists


def test_pip_refuses_a_wheel_whose_hash_differs(host):
    # The wheelhouse is installed in hash-checking mode: one wrong digit fails.
    wheel = LOCK.get("nccl_wheel")
    wrong = ("0" if wheel.sha256[0] != "0" else "1") + wheel.sha256[1:]
    result = host.run(
        "set -e; d=$(mktemp -d); trap 'rm -rf $d' EXIT;"
        f" echo 'nvidia_nccl_cu12=={wheel.version} --hash=sha256:{wrong}' > $d/req.txt;"
        f" {VENV}/bin/python -m pip install --dry-run --ignore-installed --no-index"
        " --require-hashes --find-links /var/tmp/efa-image-build/wheelhouse -r $d/req.txt"
    )
    assert result.rc != 0
    assert "DO NOT MATCH THE HASHES" in result.stderr
