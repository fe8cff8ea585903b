"""The build cache and the verified-image records in a real registry, and how they fail.

Each test starts Debian's CNCF distribution registry on loopback
(tools/localregistry.py): a fresh storage directory, read-only or with htpasswd
auth where a test needs a registry that refuses. The archives are generic
fixtures (a small tar.gz made here), not upstream builds. A damaged blob is
made by overwriting the registry's stored copy: the registry then serves bytes
that do not match the digest it names, as a broken disk or proxy would.
"""

from __future__ import annotations

import base64
import io
import json
import tarfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import bcrypt
import pytest
import yaml

from efa_image.building import build, build_cache, fingerprint, published, registry_cache
from efa_image.registry import credentials
from efa_image.registry.client import DigestMismatch, RegistryError, for_repository
from efa_image.registry.reference import Repository
from localplay import ROOT, run_playbook
from localregistry import free_port, local_registry

KEY = "0123456789abcdef" * 4
USER, PASSWORD = "builder", "s3cret-never-logged"


def archive(path: Path, content: bytes = b"libfabric.so " * 512) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("opt/amazon/efa/lib/libfabric.so.1")
        info.size = len(content)
        tar.addfile(info, io.BytesIO(content))
    return path


@pytest.fixture
def registry(tmp_path):
    with local_registry(tmp_path / "registry") as address:
        yield address


def cache(address: str) -> registry_cache.Client:
    return for_repository(Repository(address, "team/build-cache"))


def test_an_entry_published_is_taken_back_whole_on_another_machine(registry, tmp_path):
    built = archive(tmp_path / "built.tar.gz")
    assert registry_cache.publish(cache(registry), "libfabric", KEY, built) is True
    assert registry_cache.publish(cache(registry), "libfabric", KEY, built) is False
    fresh = cache(registry)
    taken = registry_cache.fetch(fresh, "libfabric", KEY, tmp_path / "fresh")
    assert taken == build_cache.lookup(tmp_path / "fresh", "libfabric", KEY)
    assert taken.read_bytes() == built.read_bytes()
    assert fresh.received >= built.stat().st_size
    assert registry_cache.fetch(fresh, "libfabric", "f" * 64, tmp_path / "fresh") is None
    # An OCI artifact the registry lists under COMPONENT-KEY, its config naming the entry.
    manifest = fresh.manifest(f"libfabric-{KEY}").data
    assert manifest["config"]["mediaType"] == registry_cache.CONFIG_TYPE
    assert [layer["mediaType"] for layer in manifest["layers"]] == [registry_cache.LAYER_TYPE]


def test_an_unreachable_registry_is_a_miss_within_seconds(tmp_path):
    start = time.monotonic()
    with pytest.raises(RegistryError) as err:
        registry_cache.fetch(cache(f"127.0.0.1:{free_port()}"), "openmpi", KEY, tmp_path)
    assert time.monotonic() - start < 5
    assert "is unreachable (connection refused)" in str(err.value)
    assert "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_a_damaged_blob_is_refused_and_nothing_is_kept(registry, tmp_path):
    built = archive(tmp_path / "built.tar.gz")
    registry_cache.publish(cache(registry), "openmpi", KEY, built)
    layer = cache(registry).manifest(f"openmpi-{KEY}").data["layers"][0]["digest"]
    hexdigest = layer.removeprefix("sha256:")
    stored = next((tmp_path / "registry" / "storage").rglob(f"blobs/sha256/*/{hexdigest}/data"))
    stored.write_bytes(b"X" + stored.read_bytes()[1:])
    with pytest.raises(DigestMismatch) as err:
        registry_cache.fetch(cache(registry), "openmpi", KEY, tmp_path / "fresh")
    assert "damaged" in str(err.value) and "\n" not in str(err.value)
    assert build_cache.lookup(tmp_path / "fresh", "openmpi", KEY) is None
    assert [p.name for p in (tmp_path / "fresh").iterdir()] == []


def test_two_builders_publishing_one_key_at_once_leave_one_valid_entry(registry, tmp_path):
    """Equal inputs, different bytes (tar and gzip stamp times): either entry is valid."""
    builds = [archive(tmp_path / f"{n}.tar.gz", f"build {n} ".encode() * 4096) for n in range(2)]
    errors: list[BaseException] = []

    def publish(path: Path) -> None:
        try:
            registry_cache.publish(cache(registry), "nccl", KEY, path)
        except BaseException as exc:  # a thread's failure must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=publish, args=(path,)) for path in builds]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    taken = registry_cache.fetch(cache(registry), "nccl", KEY, tmp_path / "fresh")
    assert taken.read_bytes() in {path.read_bytes() for path in builds}


def test_a_read_only_registry_refuses_the_publication_in_one_line(tmp_path):
    built = archive(tmp_path / "built.tar.gz")
    with (
        local_registry(tmp_path / "ro", readonly=True) as address,
        pytest.raises(RegistryError) as err,
    ):
        registry_cache.publish(cache(address), "libfabric", KEY, built)
    assert "does not accept pushes" in str(err.value) and "\n" not in str(err.value)


@pytest.fixture
def registry_with_login(tmp_path):
    directory = tmp_path / "auth"
    directory.mkdir()
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    (directory / "htpasswd").write_text(f"{USER}:{hashed}\n")
    with local_registry(directory, auth=True) as address:
        yield address


def docker_config(tmp_path: Path, address: str, monkeypatch, password: str = PASSWORD) -> None:
    """What `docker login ADDRESS` writes (no credential store): DOCKER_CONFIG/config.json."""
    auth = base64.b64encode(f"{USER}:{password}".encode()).decode()
    config = tmp_path / "docker"
    config.mkdir(exist_ok=True)
    (config / "config.json").write_text(json.dumps({"auths": {address: {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(config))


def test_without_a_login_the_registry_refuses_in_one_line(
    registry_with_login, tmp_path, monkeypatch
):
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "no-docker-config"))
    with pytest.raises(RegistryError) as err:
        registry_cache.fetch(cache(registry_with_login), "libfabric", KEY, tmp_path / "fresh")
    assert "refused access: not logged in" in str(err.value)
    assert f"docker login {registry_with_login}" in str(err.value)


def test_docker_logins_credentials_work_and_never_reach_a_message(
    registry_with_login, tmp_path, monkeypatch, capfd, caplog
):
    docker_config(tmp_path, registry_with_login, monkeypatch)
    built = archive(tmp_path / "built.tar.gz")
    assert registry_cache.publish(cache(registry_with_login), "libfabric", KEY, built)
    taken = registry_cache.fetch(cache(registry_with_login), "libfabric", KEY, tmp_path / "f")
    assert taken.read_bytes() == built.read_bytes()
    stale = f"{PASSWORD}-expired"
    docker_config(tmp_path, registry_with_login, monkeypatch, stale)
    with pytest.raises(RegistryError) as err:
        registry_cache.fetch(cache(registry_with_login), "libfabric", KEY, tmp_path / "g")
    assert "credentials were rejected" in str(err.value)
    out, errors = capfd.readouterr()
    shown = out + errors + caplog.text + str(err.value)
    shown += repr(cache(registry_with_login).credentials())
    for secret in (PASSWORD, stale):
        assert secret not in shown and base64.b64encode(secret.encode()).decode() not in shown


def record(digest: str) -> published.Record:
    labels = {"org.efa-image.fingerprint": digest, "org.efa-image.flavor": "efa-reduced"}
    return published.Record(digest, "sha256:" + "1" * 64, "sha256:" + "2" * 64, labels, ["t"])


def test_a_published_record_is_found_by_its_fingerprint_only(registry):
    repository = Repository(registry, "team/images")
    pushed = published.publish(repository, record("a" * 64))
    assert pushed.startswith(f"{registry}/team/images:fingerprint-{'a' * 64}.verified@sha256:")
    assert published.find(repository, "a" * 64) == record("a" * 64)
    assert published.find(repository, "b" * 64) is None


def test_a_record_under_another_fingerprints_tag_is_refused(registry):
    """A record copied to the tag of another fingerprint must not make that build reuse it."""
    repository = Repository(registry, "team/images")
    published.publish(repository, record("a" * 64))
    client = for_repository(repository)
    copied = client.manifest(published.record_tag("a" * 64))
    client.push_manifest(published.record_tag("c" * 64), copied.body)
    with pytest.raises(RegistryError, match="names another build"):
        published.find(repository, "c" * 64)


# Through Ansible: what a build's log shows for the build cache's answers.


def cache_play(tmp_path: Path, setting: str, tasks: list[dict]) -> str:
    play = tmp_path / "play.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "localhost",
                    "connection": "local",
                    "gather_facts": False,
                    "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}"},
                    "tasks": tasks,
                }
            ]
        )
    )
    env = {"ANSIBLE_ACTION_PLUGINS": str(ROOT / "roles/common/action_plugins")}
    proc = run_playbook(play, "-e", json.dumps({"setting": setting}), env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


LOOKUP = {
    "efa_image_build_cache": {
        "component": "libfabric",
        "inputs": {"archive": "abc"},
        "probe": "## os\nID=debian\n",
        "cache": "{{ setting }}",
    },
    "register": "answer",
}
SHOW = {"ansible.builtin.debug": {"msg": "answer {{ answer.hit }} {{ answer.source }}"}}


def test_an_unreachable_registry_costs_the_build_one_warning_line(tmp_path):
    setting = f"{tmp_path / 'builds'},oci://127.0.0.1:{free_port()}/cache"
    output = cache_play(tmp_path, setting, [LOOKUP, SHOW])
    warnings = [line for line in output.splitlines() if "[WARNING]: build cache" in line]
    assert len(warnings) == 1, output
    assert "libfabric compiled, not taken from the registry" in warnings[0]
    assert "unreachable (connection refused)" in warnings[0]
    assert "answer False" in output


def test_a_stored_build_reaches_a_fresh_machine_through_the_registry(registry, tmp_path):
    built = archive(tmp_path / "built.tar.gz")
    first = cache_play(
        tmp_path,
        f"{tmp_path / 'one'},oci://{registry}/cache",
        [
            LOOKUP,
            {
                "efa_image_build_cache": {
                    "component": "libfabric",
                    "store": str(built),
                    "key": "{{ answer.key }}",
                    "cache": "{{ setting }}",
                },
                "register": "stored",
            },
            {"ansible.builtin.debug": {"msg": "published {{ stored.published }}"}},
        ],
    )
    assert "published True" in first and "[WARNING]: build cache" not in first
    second = cache_play(tmp_path, f"{tmp_path / 'two'},oci://{registry}/cache", [LOOKUP, SHOW])
    assert "answer True registry" in second and "[WARNING]: build cache" not in second
    [entry] = (tmp_path / "two").glob("libfabric-*.tar.gz")
    assert entry.read_bytes() == built.read_bytes()


# The build's side: a registry that cannot answer, or has no record, is one line and a build.


def a_plan(digest: str) -> SimpleNamespace:
    return SimpleNamespace(fingerprint=fingerprint.Fingerprint(digest, {}))


def test_no_record_in_the_registry_means_building_said_in_one_line(registry, capsys):
    result = build.BuildResult("efa", "portable", "base", {})
    assert build.pull_verified(f"{registry}/team/images", a_plan("d" * 64), result) is None
    assert capsys.readouterr().out == (
        f"no verified image of fingerprint {'d' * 16} in {registry}/team/images: building\n"
    )
    assert result.reused_from == ""


def test_an_unreachable_registry_means_building_said_in_one_line(capsys):
    address = f"127.0.0.1:{free_port()}"
    result = build.BuildResult("efa", "portable", "base", {})
    assert build.pull_verified(f"{address}/team/images", a_plan("d" * 64), result) is None
    assert capsys.readouterr().out == (
        f"reuse from {address}/team/images: registry {address} is unreachable "
        "(connection refused); building\n"
    )


def test_a_docker_config_entry_that_is_not_base64_gives_no_credentials(tmp_path, monkeypatch):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auths": {"r.example.com": {"auth": "%%%not base64"}}}))
    assert credentials.from_docker_config("r.example.com", config) is None
    good = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    config.write_text(json.dumps({"auths": {"https://r.example.com": {"auth": good}}}))
    assert credentials.from_docker_config("r.example.com", config) == credentials.Credentials(
        USER, PASSWORD
    )
