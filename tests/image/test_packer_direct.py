"""`packer build` run by hand in packer/, as a user does, builds what `efa-image build` builds.

The command is the README's (`cd packer && packer build -only=docker.image -var
flavor=F -var profile=P .`): no var file, no lock overlay; the playbooks apply
the profile's overlay themselves, and Packer's variables take the mirror and
the build cache from the environment (EFA_IMAGE_MIRROR, EFA_IMAGE_BUILD_CACHE)
as the CLI does. The image the CLI built (tests/image/test_distro_profile.py, tag
efa-image-test:efa-reduced-distro) is reused when present, else built here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from efa_image.artifacts import lock

ROOT = Path(__file__).resolve().parents[2]
# The distro profile's image: test_distro_profile.py built it with the CLI in the same
# pytest session, and building it compiles almost nothing. The profile's lock
# overlay (portable's) is test_profile_overlay_from_any_playbook_dir below.
FLAVOR = "efa-reduced"
PROFILE = "distro"
MIRROR = os.environ.get("EFA_IMAGE_MIRROR", "")
BASE = os.environ.get("EFA_IMAGE_BASE", "efa-image/base:debian13")
# packer/variables.pkr.hcl's base_image default.
PACKER_BASE = "efa-image/base:debian13"
CLI_TAG = f"efa-image-test:{FLAVOR}-{PROFILE}"
VENV_PATH = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"
IMPORTED = re.compile(r"Imported Docker image: (sha256:[0-9a-f]{64})")
CONTAINER = re.compile(r"--name (efa-image-build-[0-9a-f-]{36})\b")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def docker(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, check=check)


def image_id(ref: str) -> str | None:
    proc = docker("image", "inspect", "--format", "{{.Id}}", ref, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


def manifest(image: str) -> dict:
    return json.loads(docker("run", "--rm", image, "cat", "/opt/efa-image/manifest.json").stdout)


def components(data: dict) -> dict[str, tuple]:
    return {c["name"]: (c["version"], c["sha256"], c["method"]) for c in data["components"]}


@pytest.fixture(scope="module")
def cli_image():
    """The CLI's image by its tag (test_image_build.py made it), or built and removed here."""
    if existing := image_id(CLI_TAG):
        yield existing
        return
    argv = [sys.executable, "-m", "efa_image", "build", "--flavor", FLAVOR, "--profile", PROFILE]
    argv += ["--base-image", BASE, "--repository", "efa-image-test"]
    argv += ["--mirror", MIRROR] if MIRROR else []
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    built = image_id(CLI_TAG)
    assert built
    yield built
    docker("rmi", "-f", built, check=False)


@pytest.fixture(scope="module")
def packer_image(cli_image, tmp_path_factory):
    """The README's command, from packer/, with the virtualenv's bin on PATH."""
    argv = ["packer", "build", "-only=docker.image", "-var", f"flavor={FLAVOR}"]
    argv += ["-var", f"profile={PROFILE}"]
    argv += ["-var", f"base_image={BASE}"] if BASE != PACKER_BASE else []
    log = tmp_path_factory.mktemp("packer") / "packer.log"
    start = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.run(
            [*argv, "."],
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT / "packer",
            env={**os.environ, "PATH": VENV_PATH},
            timeout=1800,
            check=False,
        )
    output = ANSI.sub("", log.read_text())
    print(f"packer build -only=docker.image: {time.monotonic() - start:.0f}s")
    imported = IMPORTED.search(output)
    try:
        assert proc.returncode == 0, output[-5000:]
        assert imported, output[-3000:]
        yield {"image": imported.group(1), "output": output}
    finally:
        # Packer removes its container after a build; a failed or killed one may not.
        for name in set(CONTAINER.findall(output)):
            docker("rm", "-f", name, check=False)
        if imported and imported.group(1) != cli_image:
            docker("rmi", "-f", imported.group(1), check=False)


def test_packer_build_matches_the_cli_build(cli_image, packer_image):
    ours, theirs = manifest(packer_image["image"]), manifest(cli_image)
    assert components(ours) == components(theirs)
    for key in ("flavor", "profile", "base_image"):
        assert ours[key] == theirs[key], key
    assert ours["flavor"] == FLAVOR and ours["profile"] == PROFILE
    assert not os.environ.get("EFA_IMAGE_LOCK_OVERLAY")

    def config(image: str) -> dict:
        return json.loads(docker("image", "inspect", "--format", "{{json .Config}}", image).stdout)

    mine, cli = config(packer_image["image"]), config(cli_image)
    assert sorted(mine["Env"]) == sorted(cli["Env"])
    assert mine["Cmd"] == cli["Cmd"]
    for label in ("org.efa-image.flavor", "org.efa-image.profile", "org.efa-image.base-image"):
        assert mine["Labels"][label] == cli["Labels"][label], label


def test_profile_overlay_from_any_playbook_dir_applied_once(tmp_path):
    """ansible-playbook outside playbooks/: the portable profile's relative overlay still
    resolves, and naming it again in EFA_IMAGE_LOCK_OVERLAY (as efa-image build does, and
    relative to playbooks/ too) changes nothing."""
    (tmp_path / "inventory").mkdir()
    (tmp_path / "inventory" / "group_vars").symlink_to(ROOT / "playbooks" / "group_vars")
    (tmp_path / "inventory" / "hosts").write_text("localhost ansible_connection=local\n")
    (tmp_path / "play.yml").write_text(
        textwrap.dedent("""\
        - name: Resolve
          hosts: all
          gather_facts: false
          vars:
            ansible_python_interpreter: "{{ ansible_playbook_python }}"
          tasks:
            - name: Resolve the lock entries
              ansible.builtin.include_role:
                name: artifact
                tasks_from: resolve
              vars:
                artifact_names: [libfabric, openmpi]
            - name: Write them out
              ansible.builtin.copy:
                content: "{{ artifact_info | to_json }}"
                dest: "{{ playbook_dir }}/resolved.json"
                mode: "0644"
        """)
    )

    def resolved(profile: str, env_overlay: str) -> dict[str, str]:
        argv = ["ansible-playbook", "-i", "inventory/hosts", "play.yml"]
        proc = subprocess.run(
            [*argv, "-e", f"efa_image_profile={profile}"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={
                **os.environ,
                "PATH": VENV_PATH,
                "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
                "EFA_IMAGE_LOCK_OVERLAY": env_overlay,
            },
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        data = json.loads((tmp_path / "resolved.json").read_text())
        return {name: entry["version"] for name, entry in data.items()}

    overlay = ROOT / "playbooks" / "lock-overlays" / "debian-sources.yml"
    debian = lock.load(overlays=[overlay])
    upstream = lock.load()
    expected = {name: debian.get(name).version for name in ("libfabric", "openmpi")}
    assert expected != {name: upstream.get(name).version for name in expected}
    assert resolved("portable", "") == expected
    assert resolved("portable", f"{overlay}:lock-overlays/debian-sources.yml") == expected
    assert resolved("upstream", "") == {name: upstream.get(name).version for name in expected}
