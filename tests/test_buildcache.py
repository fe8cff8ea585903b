"""The build cache's key, look-up and store (efa_image.building.build_cache)."""

from __future__ import annotations

from pathlib import Path

import pytest

from efa_image.building import build_cache
from efa_image.errors import EfaImageError
from efa_image.registry.reference import Repository

OS = 'ID=debian\nVERSION_ID="13"\namd64\n'
DPKG = (
    "gcc-14=14.2.0-19\nlibc6-dev:amd64=2.41-12\nlibibverbs-dev:amd64=56.1-1\n"
    "make=4.4.1-2\ncurl=8.14.1-2\npython3=3.13.5-1\n"
)
POLICY = """gcc:
  Installed: (none)
  Candidate: 4:14.2.0-1
  Version table:
     4:14.2.0-1 500
        500 http://deb.debian.org/debian trixie/main amd64 Packages
zlib1g-dev:
  Installed: 1:1.3.dfsg+really1.3.1-1+b1
  Candidate: 1:1.3.dfsg+really1.3.1-1+b1
  Version table:
 *** 1:1.3.dfsg+really1.3.1-1+b1 500
        100 /var/lib/dpkg/status
"""
INPUTS = {"version": "5.0.7", "sha256": "ab" * 32, "configure": ["--prefix=/opt/x"]}


def test_key_covers_compilers_and_dev_packages_only():
    assert build_cache.toolchain_packages(DPKG) == [
        "gcc-14=14.2.0-19",
        "libc6-dev:amd64=2.41-12",
        "libibverbs-dev:amd64=56.1-1",
    ]
    # A runtime package or tool that no configure detects leaves the key alone.
    unrelated = DPKG.replace("curl=8.14.1-2", "curl=8.15.0-1") + "openssh-server=1:10.0p1-7\n"
    assert build_cache.key("openmpi", INPUTS, OS, unrelated) == build_cache.key(
        "openmpi", INPUTS, OS, DPKG
    )


@pytest.mark.parametrize(
    "change",
    [
        {"component": "libfabric"},
        {"inputs": {**INPUTS, "sha256": "cd" * 32}},
        {"inputs": {**INPUTS, "configure": ["--prefix=/opt/x", "--with-cuda=/usr/local/cuda"]}},
        {"inputs": {**INPUTS, "libfabric": "ef" * 32}},
        {"os_release": OS.replace('"13"', '"12"')},
        {"os_release": OS.replace("amd64", "arm64")},
        {"packages": DPKG.replace("gcc-14=14.2.0-19", "gcc-14=14.2.0-20")},
        {"packages": DPKG + "libhwloc-dev:amd64=2.12.0-4\n"},
        {"policy": POLICY.replace("Candidate: 4:14.2.0-1", "Candidate: 4:14.2.0-2")},
        {"policy": POLICY + "perl:\n  Installed: (none)\n  Candidate: 5.40.1-6\n"},
    ],
    ids=[
        "component",
        "archive",
        "options",
        "dependency",
        "release",
        "arch",
        "compiler",
        "new-dev",
        "build-package-version",
        "build-package-added",
    ],
)
def test_every_input_that_decides_the_build_changes_the_key(change):
    args = {
        "component": "openmpi",
        "inputs": INPUTS,
        "os_release": OS,
        "packages": DPKG,
        "policy": POLICY,
    }
    assert build_cache.key(**(args | change)) != build_cache.key(**args)


def test_requested_build_packages_count_as_installed_or_as_apts_candidate():
    assert build_cache.requested_versions(POLICY) == {
        "gcc": "4:14.2.0-1",
        "zlib1g-dev": "1:1.3.dfsg+really1.3.1-1+b1",
    }


def test_packages_other_builds_installed_leave_the_key_alone():
    """The key before the toolchain is installed equals the key once another component's
    build installed it: a hit needs no toolchain, whichever component compiled first."""
    base = "libc6-dev:amd64=2.41-12\ncurl=8.14.1-2\n"
    baseline = "libc6-dev curl"
    later = base + "gcc-14=14.2.0-19\nlibibverbs-dev:amd64=56.1-1\n"
    installed_policy = POLICY.replace("Installed: (none)", "Installed: 4:14.2.0-1")
    before = build_cache.key("openmpi", INPUTS, OS, base, policy=POLICY)
    after = build_cache.key(
        "openmpi", INPUTS, OS, later, baseline=baseline, policy=installed_policy
    )
    assert before == after
    # The base image's own -dev packages do count.
    assert build_cache.key("openmpi", INPUTS, OS, later, policy=POLICY) != before


def test_key_ignores_the_order_of_inputs_and_packages():
    shuffled = "\n".join(reversed(DPKG.splitlines()))
    reordered = dict(reversed(list(INPUTS.items())))
    assert build_cache.key("openmpi", reordered, OS, shuffled) == build_cache.key(
        "openmpi", INPUTS, OS, DPKG
    )


def test_bad_component_name_is_refused():
    with pytest.raises(build_cache.BuildCacheError, match="component"):
        build_cache.key("../x", INPUTS, OS, DPKG)


def test_store_then_lookup(tmp_path: Path):
    digest = build_cache.key("openmpi", INPUTS, OS, DPKG)
    assert build_cache.lookup(tmp_path, "openmpi", digest) is None
    path = build_cache.store(tmp_path, "openmpi", digest, lambda p: p.write_bytes(b"tree"))
    assert path == tmp_path / f"openmpi-{digest}.tar.gz"
    assert build_cache.lookup(tmp_path, "openmpi", digest) == path
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, path.name + ".sha256"]


def test_the_stored_glob_matches_each_stored_entrys_checksum_only(tmp_path: Path):
    build_cache.store(tmp_path, "openmpi", "0" * 64, lambda p: p.write_bytes(b"tree"))
    build_cache.store(tmp_path, "openmpi4", "1" * 64, lambda p: p.write_bytes(b"tree"))
    matched = sorted(tmp_path.glob(Path(build_cache.stored_glob(tmp_path, "openmpi")).name))
    assert matched == [tmp_path / f"openmpi-{'0' * 64}.tar.gz.sha256"]


def test_a_damaged_entry_is_a_miss_and_is_removed(tmp_path: Path):
    path = build_cache.store(tmp_path, "libfabric", "0" * 64, lambda p: p.write_bytes(b"tree"))
    path.write_bytes(b"truncated")
    assert build_cache.lookup(tmp_path, "libfabric", "0" * 64) is None
    assert list(tmp_path.iterdir()) == []


def test_an_entry_without_its_checksum_is_a_miss(tmp_path: Path):
    (tmp_path / f"libfabric-{'0' * 64}.tar.gz").write_bytes(b"tree")
    assert build_cache.lookup(tmp_path, "libfabric", "0" * 64) is None


def test_a_failed_store_leaves_nothing(tmp_path: Path):
    def interrupted(partial: Path) -> None:
        partial.write_bytes(b"half")
        raise OSError("connection lost")

    with pytest.raises(OSError, match="connection lost"):
        build_cache.store(tmp_path, "openmpi", "1" * 64, interrupted)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(build_cache.BuildCacheError, match="no archive"):
        build_cache.store(tmp_path, "openmpi", "1" * 64, lambda p: None)
    assert list(tmp_path.iterdir()) == []


def test_locations_setting_environment_default_and_off(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("EFA_IMAGE_CACHE", str(tmp_path / "artifacts"))
    monkeypatch.delenv(build_cache.ENV, raising=False)
    default = tmp_path / "artifacts" / "builds"
    assert build_cache.locations() == build_cache.Locations(default)
    monkeypatch.setenv(build_cache.ENV, str(tmp_path / "env"))
    assert build_cache.locations() == build_cache.Locations(tmp_path / "env")
    assert build_cache.locations(str(tmp_path / "set")).directory == tmp_path / "set"
    monkeypatch.setenv(build_cache.ENV, "off")
    assert build_cache.locations() == build_cache.Locations(None)


def test_a_registry_gets_the_default_directory_in_front_or_the_one_given(monkeypatch, tmp_path):
    monkeypatch.setenv("EFA_IMAGE_CACHE", str(tmp_path))
    alone = build_cache.locations("oci://127.0.0.1:5000/team/cache")
    assert alone.directory == tmp_path / "builds"
    assert alone.registry == Repository("127.0.0.1:5000", "team/cache")
    both = build_cache.locations(f"{tmp_path}/ci , oci://r.example.com/cache")
    assert both == build_cache.Locations(tmp_path / "ci", Repository("r.example.com", "cache"))


@pytest.mark.parametrize(
    "setting",
    [
        "oci://a.example.com/x,oci://b.example.com/y",
        "/one,/two",
        "off,oci://a.example.com/x",
        "s3://bucket/cache",
        "oci://no-registry",
        "oci://a.example.com/Upper",
    ],
)
def test_a_bad_setting_is_refused_naming_the_forms(setting):
    with pytest.raises(EfaImageError) as err:
        build_cache.locations(setting)
    assert "\n" not in str(err.value)


def test_the_probes_sections_feed_the_key():
    probe = f"## os\n{OS}## installed\n{DPKG}## baseline\ngcc-14 make\n## policy\n{POLICY}"
    sections = build_cache.probe_sections(probe)
    assert sections["os"] == OS and sections["installed"] == DPKG
    assert sections["baseline"].split() == ["gcc-14", "make"]
    assert build_cache.requested_versions(sections["policy"])["gcc"] == "4:14.2.0-1"
    # No baseline section: the target's packages are all its own.
    assert "baseline" not in build_cache.probe_sections(f"## os\n{OS}## policy\n")
