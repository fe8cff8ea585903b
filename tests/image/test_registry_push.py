"""Pushing a verified image into a real registry on loopback, and pulling it back.

`efa-image build --push` of the flavour and profile tests/image/test_image_build.py
just built (unchanged, so it reuses that verified image) pushes it under its
build tags into the CNCF distribution registry (tools/localregistry.py);
the registry's API must hold that very image, its local tags of the registry
are removed and pulled back with the same digest, and `efa-image verify` passes
on the pulled image. Then the refusals: an unreachable registry, a read-only
one, one that requires a login, and an image that did not pass verification;
each gives one line and leaves the local image with its tags.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time

import pytest
from imagebuild import BASE, build_argv, docker, ensure_base

from localregistry import free_port, get, local_registry

NAME = "efa-image-push-test"


def efa_image(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "efa_image", *argv], capture_output=True, text=True
    )


def repo_tags(image: str) -> list[str]:
    return json.loads(docker("image", "inspect", "--format", "{{json .RepoTags}}", image))


def remove_tags(image: str, repository: str) -> None:
    """Only this test's tags (of `repository`); the build's tags stay."""
    for tag in repo_tags(image):
        if tag.startswith(f"{repository}:"):
            docker("image", "rm", "--no-prune", tag)


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    with local_registry(tmp_path_factory.mktemp("registry")) as address:
        yield address


@pytest.fixture(scope="module")
def pushed(registry, tmp_path_factory) -> dict:
    """`efa-image build --push`: the unchanged build reuses the verified image and pushes it."""
    report = tmp_path_factory.mktemp("build") / "report.json"
    repository = f"{registry}/{NAME}"
    start = time.monotonic()
    proc = subprocess.run(
        build_argv("--report", str(report), "--push", repository), capture_output=True, text=True
    )
    seconds = time.monotonic() - start
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-5000:]
    data = json.loads(report.read_text())
    data.update(output=proc.stdout, seconds=seconds, repository=repository)
    print(f"build --push: {seconds:.1f}s, reused {data['reused']}")
    print("\n".join(line for line in proc.stdout.splitlines() if line.startswith("pushed ")))
    yield data
    remove_tags(data["image"], repository)


def test_every_build_tag_was_pushed_with_one_digest(pushed):
    names = [tag.split(":", 1)[1] for tag in pushed["tags"]]
    names.append(f"fingerprint-{pushed['fingerprint']}")
    assert sorted(pushed["pushed"]) == sorted(f"{pushed['repository']}:{n}" for n in names)
    digests = set(pushed["pushed"].values())
    assert len(digests) == 1 and next(iter(digests)).startswith("sha256:"), pushed["pushed"]
    assert f"{pushed['repository']}@{next(iter(digests))}" in pushed["output"]


def test_the_registry_holds_this_image_and_every_layer(pushed, registry):
    """The manifest's digest is the reported one, its config is the image's ID, and every
    blob it names is served with the content its digest says."""
    digest = next(iter(pushed["pushed"].values()))
    tag = pushed["tags"][0].split(":", 1)[1]
    body = get(registry, f"{NAME}/manifests/{tag}").read()
    assert f"sha256:{hashlib.sha256(body).hexdigest()}" == digest
    manifest = json.loads(body)
    assert manifest["config"]["digest"] == pushed["image"]
    for blob in [manifest["config"], *manifest["layers"]]:
        sha, size = hashlib.sha256(), 0
        with get(registry, f"{NAME}/blobs/{blob['digest']}", accept="*/*") as response:
            while chunk := response.read(1 << 20):
                sha.update(chunk)
                size += len(chunk)
        assert (f"sha256:{sha.hexdigest()}", size) == (blob["digest"], blob["size"])


def test_pulled_back_with_the_same_digest_it_verifies(pushed):
    repository, image = pushed["repository"], pushed["image"]
    remove_tags(image, repository)
    assert not [t for t in repo_tags(image) if t.startswith(f"{repository}:")]
    reference = f"{repository}:{pushed['tags'][0].split(':', 1)[1]}"
    start = time.monotonic()
    docker("pull", reference)
    print(f"pull: {time.monotonic() - start:.1f}s")
    digest = next(iter(pushed["pushed"].values()))
    inspected = json.loads(docker("image", "inspect", "--format", "{{json .}}", reference))
    assert inspected["Id"] == image
    assert f"{repository}@{digest}" in inspected["RepoDigests"]
    verify = efa_image("verify", "--image", reference)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def assert_one_line_refusal(proc: subprocess.CompletedProcess, *words: str) -> str:
    errors = [line for line in proc.stderr.splitlines() if line.startswith("efa-image: error:")]
    assert proc.returncode == 1 and len(errors) == 1, proc.stdout + proc.stderr
    assert all(word in errors[0] for word in words), errors[0]
    return errors[0]


def assert_tags_unchanged(image: str, before: list[str]) -> None:
    assert sorted(repo_tags(image)) == sorted(before)


def test_an_unreachable_registry_gives_one_line_and_keeps_the_tags(pushed):
    before = repo_tags(pushed["image"])
    proc = efa_image("push", pushed["tags"][0], f"127.0.0.1:{free_port()}/{NAME}")
    print(assert_one_line_refusal(proc, "unreachable", "connection refused"))
    assert_tags_unchanged(pushed["image"], before)


@pytest.mark.parametrize(
    ("mode", "words"),
    [
        ("readonly", ("does not accept pushes", "405")),
        ("auth", ("not logged in", "docker login")),
    ],
)
def test_a_refusing_registry_gives_one_line_and_keeps_the_tags(pushed, tmp_path, mode, words):
    before = repo_tags(pushed["image"])
    options = {"readonly": mode == "readonly", "auth": mode == "auth"}
    with local_registry(tmp_path / mode, **options) as address:
        proc = efa_image("push", pushed["tags"][0], f"{address}/{NAME}")
    print(assert_one_line_refusal(proc, *words))
    assert_tags_unchanged(pushed["image"], before)


def test_an_image_that_was_not_verified_is_refused(pushed, registry):
    """The verified image's labels on another image (a commit of the base image) do not
    make it verified: the record names the image ID that passed."""
    labels = json.loads(
        docker("image", "inspect", "--format", "{{json .Config.Labels}}", pushed["image"])
    )
    container = docker("create", ensure_base(BASE), "true").strip()
    forged = f"{NAME}-forged:latest"
    try:
        changes = [arg for k, v in labels.items() for arg in ("--change", f'LABEL {k}="{v}"')]
        docker("commit", *changes, container, forged)
    finally:
        docker("rm", container)
    try:
        proc = efa_image("push", forged, f"{registry}/{NAME}-forged")
        print(assert_one_line_refusal(proc, "did not pass verification", "efa-image build"))
        assert repo_tags(forged) == [forged]
    finally:
        docker("image", "rm", forged)
