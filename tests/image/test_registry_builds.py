"""Builds on fresh machines, warmed by a registry: the build cache and verified images shared.

Against Debian's CNCF distribution registry on loopback (tools/localregistry.py),
with the flavour and profile tests/image/test_image_build.py built just before
(image-tests@push runs after image-tests@build, whose build filled this run's
build cache directory):

- build A (this machine: its build cache directory is warm) rebuilds with
  `--build-cache oci://.../cache`, which publishes every compiled component it
  takes from the directory, and `--push`, which publishes the verified image and
  its fingerprint record;
- build B, a fresh machine (empty HOME and cache), takes every compiled
  component from the registry: no compile step runs, and its image's manifest
  names the same components with the same sha256s as A's;
- build C, another fresh machine, after A's image is removed here: the same
  fingerprint finds A's record, the image is pulled and checked, and tagged:
  no `packer build`.

"A fresh machine" is a fresh HOME and artifact cache on this Docker engine: the
base image (its ID is an input of the fingerprint) stays, as it would when
pulled from the same registry.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from imagebuild import build_argv, docker

from efa_image.building import published
from efa_image.registry.client import RegistryError
from efa_image.registry.reference import Repository
from localregistry import get, local_registry

CACHE_NAME, IMAGES_NAME = "team/build-cache", "team/images"
COMPILED = {"libfabric", "openmpi"}
REPOSITORIES = ("efa-image-registry-a", "efa-image-registry-b", "efa-image-registry-c")
BUILD_STEPS = Path(__file__).resolve().parents[2] / "roles/common/tasks/build_steps.yml"
COMPILE_TASK = "Run the build steps of"


def fresh_machine(home: Path) -> dict[str, str]:
    """An empty HOME, artifact cache and build cache directory."""
    home.mkdir(parents=True)
    env = {**os.environ, "HOME": str(home), "EFA_IMAGE_CACHE": str(home / ".cache/efa-image")}
    env.pop("EFA_IMAGE_BUILD_CACHE", None)
    env.pop("XDG_CACHE_HOME", None)
    return env


def build(report: Path, *options: str, env: dict[str, str] | None = None) -> dict:
    argv = build_argv("--report", str(report), *options)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    data = json.loads(report.read_text())
    data["output"] = output
    print(f"{' '.join(argv[3:])}: stages {data['stages']}, build cache {data['build_cache']}")
    return data


def manifest_components(image: str) -> dict[str, dict]:
    manifest = json.loads(docker("run", "--rm", image, "cat", "/opt/efa-image/manifest.json"))
    return {c["name"]: c for c in manifest["components"]}


def tags(address: str, name: str) -> list[str]:
    return json.loads(get(address, f"{name}/tags/list").read())["tags"] or []


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    with local_registry(tmp_path_factory.mktemp("registry")) as address:
        yield address
    # This module's images only (its own repositories and the registry's tags).
    for repository in (*REPOSITORIES, f"{address}/{IMAGES_NAME}"):
        ids = docker("image", "ls", "--quiet", repository).split()
        if ids:
            subprocess.run(["docker", "image", "rm", "--force", *set(ids)], capture_output=True)


@pytest.fixture(scope="module")
def built_a(registry, tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("a")
    return build(
        directory / "report.json",
        "--rebuild",
        "--repository", REPOSITORIES[0],
        "--build-cache", f"oci://{registry}/{CACHE_NAME}",
        "--push", f"{registry}/{IMAGES_NAME}",
    )  # fmt: skip


@pytest.fixture(scope="module")
def built_b(registry, built_a, tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("b")
    return build(
        directory / "report.json",
        "--repository", REPOSITORIES[1],
        "--build-cache", f"oci://{registry}/{CACHE_NAME}",
        env=fresh_machine(directory / "home"),
    )  # fmt: skip


def test_build_a_publishes_its_components_and_its_verified_image(built_a, registry):
    assert set(built_a["build_cache"]) >= COMPILED, built_a["build_cache"]
    published_tags = tags(registry, CACHE_NAME)
    for component in COMPILED:
        assert any(tag.startswith(f"{component}-") for tag in published_tags), published_tags
    record = f"fingerprint-{built_a['fingerprint']}.verified"
    assert record in tags(registry, IMAGES_NAME)
    assert f"fingerprint-{built_a['fingerprint']}" in tags(registry, IMAGES_NAME)
    assert "[WARNING]: build cache" not in built_a["output"]


def test_a_fresh_machine_takes_every_compiled_component_from_the_registry(built_a, built_b):
    compiled = {name: state for name, state in built_b["build_cache"].items() if state != "off"}
    assert compiled and set(compiled.values()) == {"registry"}, built_b["build_cache"]
    assert set(compiled) == {n for n, s in built_a["build_cache"].items() if s != "off"}
    # No compile: the task that runs a miss's configure and make never started for them.
    # The log does show it where it runs: for NCCL's wheel (unpacked, never cached).
    assert f"- name: {COMPILE_TASK} {{{{ common_build_component }}}}" in BUILD_STEPS.read_text()
    assert built_b["build_cache"].get("nccl") == "off"
    assert f"{COMPILE_TASK} nccl" in built_b["output"]
    for component in compiled:
        assert f"{COMPILE_TASK} {component}" not in built_b["output"]
    assert built_b["fingerprint"] == built_a["fingerprint"] and not built_b["reused"]
    assert manifest_components(built_b["image"]) == manifest_components(built_a["image"])


def test_a_fresh_machine_pulls_the_verified_image_instead_of_building(
    built_a, built_b, registry, tmp_path
):
    docker("image", "rm", "--force", built_a["image"])
    built_c = build(
        tmp_path / "report.json",
        "--repository", REPOSITORIES[2],
        "--reuse-from", f"{registry}/{IMAGES_NAME}",
        env=fresh_machine(tmp_path / "home"),
    )  # fmt: skip
    assert built_c["reused"] and built_c["image"] == built_a["image"]
    assert built_c["reused_from"].startswith(f"{registry}/{IMAGES_NAME}@sha256:")
    assert "packer build" not in built_c["stages"] and "pull" in built_c["stages"]
    assert "==> docker" not in built_c["output"]  # Packer's builder never started
    record = json.loads(
        (tmp_path / "home/.cache/efa-image/images" / f"{built_a['fingerprint']}.json").read_text()
    )
    assert record["image"] == built_a["image"] and record["origin"] == built_c["reused_from"]


def test_an_image_that_is_not_the_recorded_one_is_refused_and_removed(built_a, registry):
    """A record naming another image ID (a registry rewritten, a tag moved) is a miss."""
    repository = Repository(registry, IMAGES_NAME)
    record = published.find(repository, built_a["fingerprint"])
    forged = published.Record(
        record.fingerprint, "sha256:" + "0" * 64, record.manifest, record.labels, record.tags
    )
    reference = f"{repository.ref}@{record.manifest}"
    with pytest.raises(RegistryError, match="is not the verified image: image ID"):
        published.pull(repository, forged)
    listed = docker("image", "ls", "--digests", "--format", "{{.Repository}}@{{.Digest}}")
    assert reference not in listed.split()
