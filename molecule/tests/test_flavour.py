"""A whole flavour converged on one container (molecule/<flavour>/): what `efa-image
build` verifies in an image, the manifest against the lock, every component's
libraries, the clean-up, and the playbook's own verify phase.

Every flavour scenario runs this file (its molecule.yml names this directory as
the verifier's); the flavour is the scenario's name, the profile portable (what
the CI mirror builds). The checks that belong to one role are the role
scenarios' test files, which the flavour scenarios run too where they hold for
a whole image.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from efa_image.artifacts import context
from efa_image.building import flavors
from efa_image.verification import verify

FLAVOR = os.environ["MOLECULE_SCENARIO_NAME"]
# Every flavour scenario's converge.yml sets it.
PROFILE = "portable"
LOCK = context.role_lock(PROFILE)
CATALOG = flavors.load_catalog()
ROOT = Path(__file__).resolve().parents[2]
# Roles that install no component of their own (mpi_ssh configures sshd and keys).
NO_COMPONENT = {"mpi_ssh"}


@pytest.fixture(scope="module")
def container(host) -> str:
    return host.backend.get_hostname()


@pytest.fixture(scope="module")
def manifest(host) -> dict:
    return json.loads(host.file("/opt/efa-image/manifest.json").content_string)


@pytest.fixture(scope="module")
def components(manifest) -> dict[str, dict]:
    return {component["name"]: component for component in manifest["components"]}


def test_efa_userspace_and_compatibility_verify_as_in_an_image_build(host):
    """The checks `efa-image build` runs on the image it built (build.verify_image)."""
    report = verify.verify_efa(host.run, version=LOCK.get("libfabric").version)
    verify.verify_compat(host.run, report)
    print(report.render())
    assert report.ok, report.render()
    assert report.mode == ("hardware" if verify.efa_devices(host.run) else "no-device")


def test_manifest_names_the_flavour_and_the_container_base(manifest, container):
    assert (manifest["flavor"], manifest["profile"]) == (FLAVOR, PROFILE)
    image = subprocess.run(
        ["docker", "inspect", "--format", "{{.Config.Image}}", container],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert manifest["base_image"] == image
    assert manifest["built"].endswith("Z")


def test_manifest_holds_exactly_the_flavours_components(components):
    expected = set(CATALOG.roles(FLAVOR)) - NO_COMPONENT
    assert set(components) == expected
    # Nothing was taken from the base image: every component was built here.
    assert {c["origin"] for c in components.values()} == {"build"}


def test_each_component_is_the_locks_pin_with_the_profiles_method(components):
    methods = CATALOG.profiles[PROFILE]
    for name, component in components.items():
        if name in methods:
            assert component["method"] == methods[name], component
        # A wheel set's record names the set and its main wheel's pin.
        pins = {a.sha256: a for a in LOCK.select([component["artifact"]])}
        assert component["sha256"] in pins, component
        pinned = pins[component["sha256"]]
        assert component["source"] == pinned.urls[0], component
        assert component["version"].split("+")[0] == pinned.version, component


def test_every_components_libraries_and_programs_resolve(host, components):
    """ldd of each shared object and program under the components' prefixes, and the
    image's own programs: nothing "not found"."""
    prefixes = sorted(
        {c["prefix"] for c in components.values() if c.get("prefix", "/usr") != "/usr"}
    )
    assert prefixes, components
    dirs = " ".join(
        shlex.quote(f"{prefix}/{sub}") for prefix in prefixes for sub in ("lib", "lib64", "bin")
    )
    script = (
        f'for d in {dirs} /opt/efa-image/bin; do [ -d "$d" ] || continue;'
        " find \"$d\" -type f \\( -name '*.so*' -o -perm -u+x \\); done"
        ' | while read -r f; do out=$(ldd "$f" 2>/dev/null) || continue; echo "== $f";'
        ' echo "$out"; done'
    )
    listing = host.check_output(script)
    checked = listing.count("== ")
    missing = [line.strip() for line in listing.splitlines() if "not found" in line]
    print(f"{checked} dynamic objects checked under {', '.join(prefixes)}, /opt/efa-image/bin")
    assert checked > len(prefixes), listing[-2000:]
    assert not missing, missing


def test_component_libraries_are_in_the_linker_cache(host, components):
    cache = host.check_output("ldconfig -p")
    for component in components.values():
        prefix = component.get("prefix", "/usr")
        if prefix == "/usr" or not host.file(f"{prefix}/lib").is_directory:
            continue
        libraries = host.check_output(
            f"find {prefix}/lib -maxdepth 1 -name 'lib*.so*' -printf '%f\\n'"
        )
        if libraries:
            assert f"=> {prefix}/" in cache, (component["name"], prefix)


def test_the_clean_up_left_no_toolchain_build_tree_or_apt_lists(host):
    script = (
        "! command -v gcc && ! command -v make && test ! -e /var/tmp/efa-image-build"
        ' && test -z "$(find /var/lib/apt/lists -type f ! -name lock)"'
    )
    result = host.run(f"sh -c {shlex.quote(script)}")
    assert result.rc == 0, result.stdout + result.stderr
    report = json.loads(host.file("/opt/efa-image/cleanup.json").content_string)
    assert report["bytes_before"] >= report["bytes_after"] > 0


def verify_phase(container: str) -> subprocess.CompletedProcess[str]:
    """`ansible-playbook playbooks/<flavour>.yml --tags verify` against the container, with
    the scenario's inventory, configuration and roles path (molecule's environment)."""
    argv = ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], "--limit", container]
    argv += [f"playbooks/{FLAVOR}.yml", "--tags", "verify", "-e", f"efa_image_profile={PROFILE}"]
    env = os.environ | {
        "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
        # A failed task's "fatal:" line in stdout, after its TASK line.
        "ANSIBLE_DISPLAY_FAILED_STDERR": "false",
    }
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, check=False)


def test_the_playbooks_verify_phase_passes_unchanged_and_fails_on_a_broken_library(host, container):
    proc = verify_phase(container)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    recap = proc.stdout[proc.stdout.index("PLAY RECAP") :]
    assert " changed=0 " in recap and " failed=0 " in recap, recap
    assert "Run the build steps" not in proc.stdout
    # It checks for real: with libfabric's library moved away, the efa role fails.
    library = host.check_output("readlink -f /opt/amazon/efa/lib/libfabric.so.1")
    host.check_output(f"mv {library} {library}.away")
    try:
        broken = verify_phase(container)
    finally:
        host.check_output(f"mv {library}.away {library}")
    assert broken.returncode != 0, broken.stdout[-3000:]
    assert "fatal: [" in broken.stdout, broken.stdout[-3000:] + broken.stderr[-3000:]
    failed_at = broken.stdout[: broken.stdout.index("fatal: [")].rsplit("TASK [", 1)[-1]
    assert failed_at.startswith("efa : "), broken.stdout[-3000:]
