"""efa_image.building.push without a registry: repositories, ECR login, the verified-image gate and
what a failed docker push says. The real pushes are tests/image/test_registry_push.py."""

from __future__ import annotations

import subprocess

import pytest

from efa_image import cli
from efa_image.building import build, fingerprint, images, published, push
from efa_image.building.tags import component_tags
from efa_image.errors import EfaImageError
from efa_image.registry import credentials, reference
from efa_image.runner import CommandError, Result

ECR = "123456789012.dkr.ecr.us-east-1.amazonaws.com/efa-image"
IMAGE = "sha256:" + "a" * 64
LABELS = {
    "org.efa-image.flavor": "efa-reduced",
    "org.efa-image.profile": "portable",
    "org.efa-image.component.libfabric": "2.1.0",
    "org.efa-image.component.nccl_wheel": "2.30.4",
    fingerprint.LABEL: "f" * 64,
}
# What docker push printed here against the CNCF distribution registry 2.8.
UNREACHABLE = (
    "The push refers to repository [127.0.0.1:45124/x]\n"
    'Get "http://127.0.0.1:45124/v2/": dial tcp 127.0.0.1:45124: connect: connection refused'
)
READ_ONLY = (
    "The push refers to repository [127.0.0.1:45123/x]\n3fb3476f73f3: Preparing\n"
    "error parsing HTTP 405 response body: invalid character 'M' looking for beginning of "
    'value: "Method not allowed\\n"'
)
NO_LOGIN = "The push refers to repository [127.0.0.1:45125/x]\n3fb3476f73f3: Preparing\n"
NO_LOGIN += "no basic auth credentials"
# ECR's answer for a repository that was never created (documented in ECR's troubleshooting).
ECR_NO_REPO = (
    "name unknown: The repository with name 'efa-image' does not exist in the registry "
    "with id '123456789012'"
)


@pytest.mark.parametrize(
    ("text", "registry", "name"),
    [
        (ECR, "123456789012.dkr.ecr.us-east-1.amazonaws.com", "efa-image"),
        ("127.0.0.1:5000/team/efa-image", "127.0.0.1:5000", "team/efa-image"),
        ("localhost:5000/efa", "localhost:5000", "efa"),
        ("registry.example.com/a.b_c-d", "registry.example.com", "a.b_c-d"),
    ],
)
def test_repositories_name_their_registry(text, registry, name):
    assert reference.parse_repository(text) == reference.Repository(registry, name)
    assert reference.parse_repository(text).ref == text


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("efa-image", "names no registry"),
        ("team/efa-image", "names no registry"),  # would go to Docker Hub
        (f"{ECR}:latest", "carries a tag"),
        (f"{ECR}@sha256:{'0' * 64}", "carries a tag or digest"),
        ("127.0.0.1:5000/EFA", "not valid"),
        ("127.0.0.1:5000/a//b", "not valid"),
    ],
)
def test_bad_repositories_are_refused_naming_the_fix(text, words):
    with pytest.raises(EfaImageError, match=words) as err:
        reference.parse_repository(text)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("registry", "account", "region"),
    [
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com", "123456789012", "us-east-1"),
        ("210987654321.dkr.ecr.eu-central-1.amazonaws.com", "210987654321", "eu-central-1"),
        ("123456789012.dkr.ecr-fips.us-gov-west-1.amazonaws.com", "123456789012", "us-gov-west-1"),
        ("123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn", "123456789012", "cn-north-1"),
    ],
)
def test_ecr_uris_give_account_and_region(registry, account, region):
    ecr = reference.ecr_of(reference.parse_repository(f"{registry}/efa-image"))
    assert ecr == reference.Ecr(account, region, registry)


@pytest.mark.parametrize(
    "registry",
    [
        "127.0.0.1:5000",
        "12345678901.dkr.ecr.us-east-1.amazonaws.com",  # eleven digits
        "123456789012.dkr.ecr.us-east-1.amazonaws.com.evil.example",
        "public.ecr.aws",
    ],
)
def test_other_registries_are_not_ecr(registry):
    assert reference.ecr_of(reference.parse_repository(f"{registry}/efa-image")) is None


def test_the_ecr_login_is_awss_documented_pipe():
    password, login = credentials.login_commands(reference.Ecr("123456789012", "us-west-2", "R"))
    assert password == ["aws", "ecr", "get-login-password", "--region", "us-west-2"]
    assert login == ["docker", "login", "--username", "AWS", "--password-stdin", "R"]


class Recorder:
    """Stands in for run_command: records argv, answers docker push with a digest."""

    def __init__(self, push_output: str | None = None) -> None:
        self.calls: list[tuple[list[str], bytes | None]] = []
        self.records: list[published.Record] = []
        self.push_output = push_output

    def __call__(self, argv, *, input_data=None, **_kwargs) -> Result:
        self.calls.append((list(argv), input_data))
        if argv[:2] == ["docker", "push"]:
            tag = argv[2].rsplit(":", 1)[1]
            if self.push_output is not None:
                raise CommandError(argv, 1, [], self.push_output)
            return Result(0, f"{tag}: digest: sha256:{'d' * 64} size: 742")
        return Result(0, "")


@pytest.fixture
def recorder(monkeypatch) -> Recorder:
    """Also stands in for the record's publication (its own tests use a real registry)."""
    recorder = Recorder()
    monkeypatch.setattr(push, "run_command", recorder)

    def publish(repository, record):
        recorder.records.append(record)
        return f"{repository.ref}:{published.record_tag(record.fingerprint)}@sha256:{'e' * 64}"

    monkeypatch.setattr(published, "publish", publish)
    return recorder


@pytest.fixture
def a_verified_image(monkeypatch, tmp_path) -> list[str]:
    """IMAGE recorded as verified for its fingerprint; returns its (mutable) local tags."""
    monkeypatch.setenv("EFA_IMAGE_CACHE", str(tmp_path))
    tags = ["efa-image:efa-reduced-portable"]
    monkeypatch.setattr(images, "image_id", lambda ref: IMAGE)
    monkeypatch.setattr(images, "labels", lambda ref: dict(LABELS))
    monkeypatch.setattr(images, "label", lambda ref, name: LABELS.get(name))
    monkeypatch.setattr(images, "repo_tags", lambda ref: list(tags))
    fingerprint.record_verified(fingerprint.Fingerprint("f" * 64, {}), IMAGE)
    return tags


def test_without_the_aws_cli_an_ecr_push_stops_before_anything(
    monkeypatch, recorder, a_verified_image
):
    monkeypatch.setattr(credentials.shutil, "which", lambda name: None)
    with pytest.raises(EfaImageError, match="aws CLI is not installed") as err:
        push.push("efa-image:efa-reduced-portable", ECR)
    assert "apt-get install awscli" in str(err.value) and "\n" not in str(err.value)
    assert recorder.calls == []


def test_an_ecr_push_logs_in_with_the_password_on_stdin(monkeypatch, recorder, a_verified_image):
    monkeypatch.setattr(credentials.shutil, "which", lambda name: f"/usr/bin/{name}")
    seen = []

    def aws(argv, **_kwargs):
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, b"s3cret\n", b"a warning on stderr\n")

    monkeypatch.setattr(credentials.subprocess, "run", aws)
    result = push.push("efa-image:efa-reduced-portable", ECR)
    assert seen == [
        credentials.login_commands(reference.ecr_of(reference.parse_repository(ECR)))[0]
    ]
    login, password = recorder.calls[0]
    assert login[:2] == ["docker", "login"] and password == b"s3cret\n"
    tags = component_tags("efa-reduced", "portable", {"libfabric": "2.1.0", "nccl_wheel": "2.30.4"})
    tags.append(f"fingerprint-{'f' * 64}")
    assert list(result.digests) == [f"{ECR}:{tag}" for tag in tags]
    assert set(result.digests.values()) == {f"sha256:{'d' * 64}"}
    pushes = [argv for argv, _ in recorder.calls if argv[:2] == ["docker", "push"]]
    assert pushes == [["docker", "push", f"{ECR}:{tag}"] for tag in tags]
    # The record last, naming the pushed manifest, the image and its build tags.
    [record] = recorder.records
    assert (record.fingerprint, record.image, record.manifest) == (
        "f" * 64,
        IMAGE,
        "sha256:" + "d" * 64,
    )
    assert record.tags == tags[:2] and record.labels == LABELS
    assert result.record.endswith(f":fingerprint-{'f' * 64}.verified@sha256:{'e' * 64}")


def test_a_failed_ecr_login_names_the_account_and_pushes_nothing(
    monkeypatch, recorder, a_verified_image
):
    monkeypatch.setattr(credentials.shutil, "which", lambda name: f"/usr/bin/{name}")
    stderr = (
        b"\nUnable to locate credentials. You can configure credentials by running aws configure.\n"
    )
    monkeypatch.setattr(
        credentials.subprocess,
        "run",
        lambda argv, **_: subprocess.CompletedProcess(argv, 253, b"", stderr),
    )
    with pytest.raises(EfaImageError, match="Unable to locate credentials") as err:
        push.push("efa-image:efa-reduced-portable", ECR)
    assert "account 123456789012" in str(err.value) and "nothing was pushed" in str(err.value)
    assert recorder.calls == []


def test_only_the_image_recorded_as_verified_is_pushed(monkeypatch, recorder, a_verified_image):
    other = "sha256:" + "b" * 64
    # The same labels (a copied fingerprint) on another image do not make it verified.
    monkeypatch.setattr(images, "image_id", lambda ref: other)
    with pytest.raises(EfaImageError, match="did not pass verification here") as err:
        push.push("forged:latest", "127.0.0.1:5000/efa")
    assert "efa-image build" in str(err.value)
    assert recorder.calls == []


def test_an_unrecorded_fingerprint_or_no_label_is_refused(
    monkeypatch, recorder, a_verified_image, tmp_path
):
    monkeypatch.setenv("EFA_IMAGE_CACHE", str(tmp_path / "elsewhere"))
    with pytest.raises(EfaImageError, match="did not pass verification"):
        push.verified("efa-image:efa-reduced-portable")
    monkeypatch.setattr(images, "label", lambda ref, name: None)
    with pytest.raises(EfaImageError, match="was not built by `efa-image build`"):
        push.verified("efa-image/base:debian13")
    assert recorder.calls == []


def test_a_missing_image_is_named(monkeypatch):
    def missing(ref):
        raise CommandError(["docker"], 1, ["No such image"])

    monkeypatch.setattr(images, "image_id", missing)
    with pytest.raises(EfaImageError, match="no local image nope:1"):
        push.verified("nope:1")


@pytest.mark.parametrize(
    ("output", "registry", "words"),
    [
        (UNREACHABLE, "127.0.0.1:45124", ("is unreachable", "connection refused")),
        (READ_ONLY, "127.0.0.1:45123", ("does not accept pushes", "Method not allowed")),
        (NO_LOGIN, "127.0.0.1:45125", ("not logged in", "docker login 127.0.0.1:45125")),
        (ECR_NO_REPO, ECR.split("/")[0], ("no such repository", "aws ecr create-repository")),
        ("denied: User: arn:aws:iam::1:user/x is not authorized", ECR.split("/")[0], ("denied",)),
        (
            'Get "https://reg.example:5000/v2/": http: server gave HTTP response to HTTPS client',
            "reg.example:5000",
            ("plain HTTP", "insecure-registries"),
        ),
        ("something new", "127.0.0.1:1", ("failed: something new",)),
    ],
)
def test_a_failed_push_is_one_line_naming_why_and_the_fix(output, registry, words):
    repository = reference.Repository(registry, "efa-image")
    line = push.explain(output, repository, f"{repository.ref}:t")
    assert "\n" not in line and line.endswith("the local image keeps its tags")
    assert all(word in line for word in words), line


def test_a_failed_push_takes_back_only_the_tag_it_added(monkeypatch, a_verified_image):
    recorder = Recorder(push_output=UNREACHABLE)
    monkeypatch.setattr(push, "run_command", recorder)
    with pytest.raises(EfaImageError, match="is unreachable"):
        push.push("efa-image:efa-reduced-portable", "127.0.0.1:45124/efa-image")
    argvs = [argv for argv, _ in recorder.calls]
    target = "127.0.0.1:45124/efa-image:efa-reduced-portable"
    assert argvs == [
        ["docker", "tag", IMAGE, target],
        ["docker", "push", target],
        ["docker", "image", "rm", "--no-prune", target],
    ]
    # A tag that was there before the push stays.
    a_verified_image.append(target)
    recorder.calls.clear()
    with pytest.raises(EfaImageError):
        push.push("efa-image:efa-reduced-portable", "127.0.0.1:45124/efa-image")
    assert [argv[:2] for argv, _ in recorder.calls] == [["docker", "tag"], ["docker", "push"]]


def test_the_digest_falls_back_to_repo_digests(monkeypatch):
    repository = reference.Repository("127.0.0.1:5000", "efa")
    digest = "sha256:" + "c" * 64
    monkeypatch.setattr(
        images,
        "repo_digests",
        lambda ref: [f"other/x@sha256:{'e' * 64}", f"127.0.0.1:5000/efa@{digest}"],
    )
    assert push.pushed_digest("no digest line", repository, IMAGE) == digest
    monkeypatch.setattr(images, "repo_digests", lambda ref: [])
    with pytest.raises(EfaImageError, match="reported no digest"):
        push.pushed_digest("", repository, IMAGE)


def test_the_build_report_carries_the_pushed_digests():
    result = build.BuildResult("efa-reduced", "portable", "b", {})
    result.pushed = {"127.0.0.1:5000/efa:t": "sha256:" + "d" * 64}
    assert '"pushed": {' in result.to_json()


def test_setup_installs_the_registry_the_push_tests_serve():
    from efa_image.setup import toolchain

    assert "docker-registry" in [req.package for req in toolchain.REQUIREMENTS]


@pytest.mark.parametrize(
    ("repository", "words"), [("team/efa-image", "names no registry"), (ECR, "aws CLI")]
)
def test_build_push_checks_the_repository_before_building(monkeypatch, capsys, repository, words):
    monkeypatch.setattr(credentials.shutil, "which", lambda name: None)
    monkeypatch.setattr(cli.build, "ensure_docker", lambda: "running")

    def no_build(*_args):
        raise AssertionError("built before the repository was checked")

    monkeypatch.setattr(build, "build", no_build)
    assert cli.main(["build", "--flavor", "efa-reduced", "--push", repository]) == 1
    assert words in capsys.readouterr().err
