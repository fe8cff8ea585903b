"""The bench's report: ratios, targets, table, and the recipe kept in step with the lock.

No docker: the builds are stubbed; what is tested is what the numbers become.
One test starts the registry (docker-registry, no docker) where it is installed.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.request import Request

import pytest

import benchmark as bench
import localregistry
from efa_image.artifacts import lock
from efa_image.artifacts.artifact_store import sha256_of
from efa_image.artifacts.context import with_profile_overlay
from efa_image.building.flavors import load_catalog

MB = 1_000_000
BASE = 160 * MB


def run(name, seconds, image_mb=0, **kwargs):
    return bench.Run(name, name, seconds, image_bytes=image_mb * MB, base_bytes=BASE, **kwargs)


# The issue's measurements (doc recipe and efa-reduced/portable on this machine).
ISSUE_RUNS = {
    "doc-cold": run("doc-cold", 461, 1957),
    "doc-unchanged": run("doc-unchanged", 1.4, 1957),
    "cold": run("cold", 606, 703),
    "unchanged": run("unchanged", 150, 703),
}
NAMES = {"project": "efa-reduced/portable", "distro": "efa-reduced/distro"}


def portable_lock(*overlays):
    return lock.load(None, with_profile_overlay(load_catalog(), "portable", list(overlays)))


def test_added_bytes_is_the_size_on_the_base():
    assert run("cold", 1, 703).added_bytes == 543 * MB
    assert bench.Run("cold", "cold", 1, image_bytes=703 * MB).added_bytes == 0
    assert run("cold", 1, 703).to_dict()["added_bytes"] == 543 * MB


def test_ratios_of_the_issues_table():
    ratios = bench.compute_ratios(ISSUE_RUNS)
    assert ratios["cold_vs_doc"] == pytest.approx(606 / 461, abs=1e-3)
    assert ratios["unchanged_seconds"] == 150
    assert ratios["image_vs_doc"] == pytest.approx(703 / 1957, abs=1e-3)
    assert ratios["added_vs_doc"] == pytest.approx(543 / 1797, abs=1e-3)
    assert ratios["doc_unchanged_seconds"] == 1.4
    # Runs that did not happen have no ratio, rather than a zero that would pass.
    assert ratios["one_bump_vs_cold"] is None
    assert ratios["distro_cold_vs_doc"] is None
    assert ratios["distro_image_vs_doc"] is None


def test_ratios_with_every_run():
    runs = {
        **ISSUE_RUNS,
        "one-bump": run("one-bump", 60.6, 700),
        "doc-one-bump": run("doc-one-bump", 455, 1950),
        "distro-cold": run("distro-cold", 92.2, 400),
    }
    ratios = bench.compute_ratios(runs)
    assert ratios["one_bump_vs_cold"] == 0.1
    assert ratios["distro_cold_vs_doc"] == pytest.approx(0.2, abs=1e-3)
    assert ratios["distro_added_vs_doc"] == pytest.approx(240 / 1797, abs=1e-3)
    assert ratios["doc_one_bump_vs_doc_cold"] == pytest.approx(455 / 461, abs=1e-3)


def test_ratio_refuses_unknown_or_zero_denominators():
    assert bench.ratio(None, 3) is None
    assert bench.ratio(3, None) is None
    assert bench.ratio(3, 0) is None
    assert bench.ratio(1, 3) == 0.333


def test_targets_pass_fail_and_not_measured():
    results = {r["key"]: r for r in bench.evaluate(bench.compute_ratios(ISSUE_RUNS), NAMES)}
    assert results["cold_vs_doc"]["result"] == "FAIL"
    assert results["unchanged_seconds"]["result"] == "FAIL"
    assert results["image_vs_doc"]["result"] == "pass"
    assert results["one_bump_vs_cold"]["result"] == "not measured"
    assert results["distro_cold_vs_doc"]["target"] == "cold efa-reduced/distro / doc recipe cold"
    assert [t.key for t in bench.TARGETS] == list(results)


def test_a_target_at_its_limit_passes():
    (result,) = [
        r
        for r in bench.evaluate({"unchanged_seconds": 5.0}, NAMES)
        if r["key"] == "unchanged_seconds"
    ]
    assert result["result"] == "pass"


def test_report_keeps_every_run_and_says_whether_targets_were_met():
    runs = {
        "doc-cold": run("doc-cold", 461, 1957),
        "cold": run("cold", 300, 703),
        "unchanged": run("unchanged", 2.0, 703),
    }
    report = bench.make_report({"names": NAMES}, runs, {"distro-cold": "no profile"})
    assert set(report["runs"]) == {"doc-cold", "cold", "unchanged"}
    assert report["runs"]["cold"]["added_bytes"] == 543 * MB
    assert report["skipped"] == {"distro-cold": "no profile"}
    assert report["targets_met"] is True
    json.dumps(report)  # the report is plain JSON
    failed = bench.make_report({"names": NAMES}, runs, {}, failed="cold failed")
    assert failed["targets_met"] is False
    assert failed["failed"] == "cold failed"
    assert bench.make_report({"names": NAMES}, ISSUE_RUNS, {})["targets_met"] is False


def test_table_shows_the_issues_rows_and_targets():
    report = bench.make_report(
        {"names": NAMES}, ISSUE_RUNS, {"distro-cold": "no profile 'distro' yet"}
    )
    table = bench.render_table(report)
    lines = table.splitlines()
    doc = next(line for line in lines if line.startswith("| AWS doc recipe"))
    assert "461 s" in doc and "1.4 s" in doc and "1957 MB" in doc and "1797 MB" in doc
    project = next(line for line in lines if line.startswith("| efa-reduced/portable"))
    assert "606 s (1.31x doc)" in project
    assert "150 s" in project
    assert "703 MB (0.36x doc)" in project
    assert "543 MB" in project
    distro = next(line for line in lines if line.startswith("| efa-reduced/distro"))
    assert "skipped: no profile 'distro' yet" in distro
    target = next(line for line in lines if line.startswith("| cold efa-reduced/portable"))
    assert target.endswith("| 1.31x | <= 0.80x | FAIL |")
    unchanged = next(line for line in lines if line.startswith("| unchanged rebuild"))
    assert "| 150 s | <= 5.0 s | FAIL |" in unchanged
    assert "| not measured |" in table


def test_project_run_reads_build_reports_defensively():
    report = {
        "image": "sha256:abc",
        "image_bytes": 703 * MB,
        "build_cache": {"libfabric": "hit", "openmpi": "hit", "nccl": "off"},
        "reused": True,
        "stages": {"packer build": 1.0},
    }
    parsed = bench.project_run("unchanged", "label", 1.234, report, BASE)
    assert parsed.seconds == 1.2
    assert parsed.reused is True
    assert parsed.build_cache["libfabric"] == "hit"
    assert parsed.added_bytes == 543 * MB
    assert parsed.details["build_report"]["stages"] == {"packer build": 1.0}
    bare = bench.project_run("cold", "label", 1.0, {"reused": "yes", "build_cache": None}, BASE)
    assert bare.reused is None
    assert bare.build_cache == {}
    assert bare.image_bytes == 0


def test_read_build_report_fails_clearly(tmp_path):
    with pytest.raises(bench.BenchError, match="no readable build report"):
        bench.read_build_report(tmp_path / "missing.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(bench.BenchError, match="not a JSON object"):
        bench.read_build_report(tmp_path / "list.json")


def test_cache_notes_name_compiles_a_rebuild_should_not_have_done():
    runs = {
        "unchanged": run("unchanged", 2, build_cache={"libfabric": "hit", "openmpi": "miss"}),
        "one-bump": run("one-bump", 50, build_cache={"libfabric": "hit", "nccl_wheel": "miss"}),
    }
    notes = bench.cache_notes(runs, ["nccl_wheel"])
    assert len(notes) == 1
    assert notes[0].startswith("unchanged: the build cache missed for openmpi")


def test_run_notes_explain_the_recipes_bump_and_a_busy_machine():
    idle = {"cpus": 2, "load_average": [0.5, 0.5, 0.5], "load_average_end": [1.0, 1.0, 1.0]}
    assert bench.run_notes(idle, {}) == []
    busy = {**idle, "load_average_end": [5.3, 4.0, 3.0]}
    (note,) = bench.run_notes(busy, {})
    assert note.startswith("load average 5.3 on 2 CPUs")
    notes = bench.run_notes(idle, {"doc-one-bump": run("doc-one-bump", 400)})
    assert "rebuilds every step" in notes[0]


def test_nccl_version_code():
    assert bench.nccl_version_code("2.30.4") == 23004
    assert bench.nccl_version_code("2.30.4-1") == 23004
    assert bench.nccl_version_code("2.9.0") == 20900


# The recipe and the lock ------------------------------------------------------------


def dockerfile_arg_defaults(path: Path) -> dict[str, str]:
    """ARG NAME=DEFAULT lines, with ${NAME} of earlier ARGs expanded as docker does."""
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^ARG\s+(\w+)=(\S+)\s*$", line)
        if match:
            name, value = match.groups()
            values[name] = re.sub(r"\$\{(\w+)\}", lambda m: values[m.group(1)], value)
    return values


def test_recipe_defaults_are_the_portable_profiles_lock(root):
    defaults = dockerfile_arg_defaults(root / bench.DOC_DOCKERFILE)
    args = bench.doc_build_args(portable_lock(), "efa-image/base:debian13")
    assert args["BASE_IMAGE"] == load_catalog().base_image("efa-reduced")
    for key, value in args.items():
        assert defaults[key] == value, f"bench/aws-doc-recipe/Dockerfile ARG {key}"


def test_recipe_uses_every_arg_the_bench_sets(root):
    text = (root / bench.DOC_DOCKERFILE).read_text()
    for version_arg, file_arg in bench.DOC_ARGS.values():
        assert f"COPY ${{{file_arg}}} " in text
        assert f"${{{version_arg}}}" in text
    # No downloads inside the build but Debian's packages.
    assert not re.search(r"\b(curl|wget|git clone|pip install)\b", text)


def test_bump_overlay_moves_only_the_nccl_wheel(root):
    before = portable_lock()
    after = portable_lock(root / bench.BUMP_OVERLAY)
    moved = bench.moved_components(before, after)
    assert list(moved) == ["nccl_wheel"]
    old, new = moved["nccl_wheel"]
    assert old == before.get("nccl_wheel").version and new != old
    bumped = after.get("nccl_wheel")
    assert bumped.filename == f"nvidia_nccl_cu12-{new}-py3-none-manylinux_2_18_x86_64.whl"
    assert bumped.urls[0].endswith(bumped.filename)
    args = bench.doc_build_args(after, "base")
    assert args["NCCL_VERSION"] == new and args["NCCL_WHEEL"] == bumped.filename


# Placing verified files -------------------------------------------------------------


def artifact_for(path: Path, sha256: str) -> lock.Artifact:
    return lock.Artifact("x", "1", "role", path.name, ("file:///x",), sha256)


def test_place_verified_copies_a_verified_file_readable_by_all(tmp_path):
    source = tmp_path / "a.tar"
    source.write_bytes(b"archive")
    source.chmod(0o600)  # as the artifact cache keeps its files
    dest = bench.place_verified(source, artifact_for(source, sha256_of(source)), tmp_path / "ctx/a")
    assert dest.read_bytes() == b"archive"
    # docker's layer cache keys COPY by mode too: one mode whatever the source's.
    assert dest.stat().st_mode & 0o777 == 0o644
    # Placing again replaces what is there.
    bench.place_verified(source, artifact_for(source, sha256_of(source)), dest)


def test_place_verified_refuses_a_file_that_is_not_the_locks(tmp_path):
    source = tmp_path / "a.tar"
    source.write_bytes(b"archive")
    with pytest.raises(bench.BenchError, match="is not the lock's"):
        bench.place_verified(source, artifact_for(source, "0" * 64), tmp_path / "ctx/a")


# Sequencing, with the builds stubbed ------------------------------------------------


class StubBench(bench.Bench):
    def __init__(self, options, work, profiles=("portable", "distro")):
        self.calls = []
        # Run name -> (registry options, checkout) of the project's runs.
        self.registry_calls = {}
        self.profiles = profiles
        super().__init__(options, work)

    def project(self, name, profile, cache, cold, bump, extra=(), checkout=None):
        self.calls.append((name, profile, cache.name, cold, bump))
        self.registry_calls[name] = (list(extra), checkout)
        return run(name, 10, 700, image=f"sha256:{name}")

    def remove_project_images(self):
        self.calls.append(("remove", tuple(bench.project_images(self.runs))))

    def doc(self, name, lock, context, no_cache, tag):
        self.calls.append((name, lock.get("nccl_wheel").version, no_cache, tag))
        return run(name, 10, 1900)

    def seed(self, lock, names, cache):
        self.calls.append(("seed", tuple(names), cache.name))

    def distro(self):
        self.catalog.profiles.pop("distro", None)
        if "distro" in self.profiles:
            self.catalog.profiles["distro"] = {}
        super().distro()


def options(root, out, skip=()):
    return bench.Options(
        "efa-reduced", "portable", "efa-image/base:debian13", None, [], set(skip), out, root
    )


@pytest.fixture
def no_docker(monkeypatch):
    """No docker, and a stand-in for the registry: an address and an empty log."""
    from efa_image.building import base

    monkeypatch.setattr(base, "ensure_ref", lambda ref, store=None: f"{ref}: present")
    monkeypatch.setattr(bench, "image_size", lambda ref: BASE)

    @contextmanager
    def registry(directory, access_log=False):
        assert access_log
        directory.mkdir(parents=True)
        (directory / localregistry.LOG).write_text("")
        yield "127.0.0.1:5000"

    monkeypatch.setattr(bench, "local_registry", registry)
    monkeypatch.setattr(bench, "registry_installed", lambda: True)
    monkeypatch.setattr(bench, "make_checkout", lambda root, dest: dest)
    monkeypatch.setattr(bench, "check_checkout", lambda checkout: None)


def test_bench_runs_in_order_with_isolated_cold_caches(root, tmp_path, no_docker):
    stub = StubBench(options(root, tmp_path), tmp_path)
    stub.all()
    names = [call[0] for call in stub.calls]
    assert names == [
        "cold", "unchanged", "doc-cold", "doc-unchanged",
        "seed", "one-bump", "doc-one-bump", "distro-cold",
        "remove", "fresh-unchanged", "remove", "fresh-one-bump",
    ]  # fmt: skip
    calls = {call[0]: call for call in stub.calls}
    assert calls["cold"] == ("cold", "portable", "cache", True, False)
    assert calls["unchanged"] == ("unchanged", "portable", "cache", False, False)
    assert calls["one-bump"] == ("one-bump", "portable", "cache", False, True)
    assert calls["seed"] == ("seed", ("nccl_wheel",), "cache")
    assert calls["distro-cold"] == ("distro-cold", "distro", "distro-cache", True, False)
    assert calls["doc-cold"][2] is True and calls["doc-unchanged"][2] is False
    assert calls["doc-one-bump"][1] != calls["doc-cold"][1]
    assert stub.bumped == {"nccl_wheel": (calls["doc-cold"][1], calls["doc-one-bump"][1])}
    assert stub.base_bytes == BASE
    assert stub.skipped == {}


def test_bench_publishes_from_cold_and_builds_fresh_from_the_registry(root, tmp_path, no_docker):
    stub = StubBench(options(root, tmp_path), tmp_path)
    stub.all()
    calls = {call[0]: call for call in stub.calls}
    reg = "127.0.0.1:5000"
    assert stub.registry_calls["cold"] == (
        [
            "--build-cache", f"{tmp_path}/cache/builds,oci://{reg}/efa-image-bench-cache",
            "--push", f"{reg}/efa-image-bench",
        ],
        None,
    )  # fmt: skip
    for name in ("unchanged", "one-bump", "distro-cold"):
        assert stub.registry_calls[name] == ([], None)
    fresh = [
        "--build-cache", f"oci://{reg}/efa-image-bench-cache",
        "--reuse-from", f"{reg}/efa-image-bench",
    ]  # fmt: skip
    checkout = tmp_path / "checkout"
    assert stub.registry_calls["fresh-unchanged"] == (fresh, checkout)
    assert stub.registry_calls["fresh-one-bump"] == (fresh, checkout)
    # Each from an empty cache of its own, the second with the bump.
    assert calls["fresh-unchanged"] == (
        "fresh-unchanged", "portable", "fresh-unchanged-cache", False, False
    )  # fmt: skip
    assert calls["fresh-one-bump"] == (
        "fresh-one-bump", "portable", "fresh-one-bump-cache", False, True
    )  # fmt: skip
    # Before each, every image of the project's runs goes; the recipe's are not asked for.
    removals = [call[1] for call in stub.calls if call[0] == "remove"]
    project = ("sha256:cold", "sha256:unchanged", "sha256:one-bump", "sha256:distro-cold")
    assert removals == [project, (*project, "sha256:fresh-unchanged")]
    # The registry serves through every run and is gone after.
    assert stub.registry is None and stub.registry_log is None
    assert (tmp_path / "efa-reduced-portable-registry.log").is_file()


def test_bench_states_why_runs_were_left_out(root, tmp_path, no_docker):
    stub = StubBench(
        options(root, tmp_path, skip={"doc", "one-bump"}), tmp_path, profiles=("portable",)
    )
    stub.all()
    assert [call[0] for call in stub.calls] == ["cold", "unchanged", "remove", "fresh-unchanged"]
    assert stub.skipped["doc-cold"] == "--skip doc"
    assert stub.skipped["one-bump"] == "--skip one-bump"
    assert stub.skipped["fresh-one-bump"] == "--skip one-bump"
    assert "no profile 'distro'" in stub.skipped["distro-cold"]


def test_bench_can_leave_out_only_the_recipes_one_bump(root, tmp_path, no_docker):
    stub = StubBench(options(root, tmp_path, skip={"doc-one-bump", "distro", "fresh"}), tmp_path)
    stub.all()
    names = [call[0] for call in stub.calls]
    assert names == ["cold", "unchanged", "doc-cold", "doc-unchanged", "seed", "one-bump"]
    assert stub.skipped == {
        "doc-one-bump": "--skip doc-one-bump",
        "distro-cold": "--skip distro",
        "fresh-unchanged": "--skip fresh",
        "fresh-one-bump": "--skip fresh",
    }
    # Without the fresh runs nothing is published: cold is timed as before.
    assert stub.registry_calls["cold"] == ([], None)


def test_bench_without_the_registry_skips_the_fresh_runs(root, tmp_path, no_docker, monkeypatch):
    monkeypatch.setattr(bench, "registry_installed", lambda: False)
    stub = StubBench(options(root, tmp_path, skip={"doc", "distro"}), tmp_path)
    stub.all()
    assert [call[0] for call in stub.calls] == ["cold", "unchanged", "seed", "one-bump"]
    assert (
        "docker-registry (the CNCF distribution registry) is not installed"
        in (stub.skipped["fresh-unchanged"])
    )
    assert stub.skipped["fresh-one-bump"] == stub.skipped["fresh-unchanged"]
    assert stub.registry_calls["cold"] == ([], None)


def test_a_registry_that_does_not_start_fails_the_bench(root, tmp_path, no_docker, monkeypatch):
    @contextmanager
    def broken(directory, access_log=False):
        raise localregistry.RegistryError("docker-registry exited with 1: bind: address in use")
        yield

    monkeypatch.setattr(bench, "local_registry", broken)
    stub = StubBench(options(root, tmp_path), tmp_path)
    with pytest.raises(bench.BenchError, match="registry did not start: docker-registry exited"):
        stub.all()
    assert stub.calls == []


class FakeBench:
    def __init__(self, options, work):
        self.runs = {"cold": run("cold", 600, 703)}
        self.skipped = {}
        self.base_bytes = BASE
        self.bumped = {"nccl_wheel": ("2.30.4", "2.30.3")}

    def all(self):
        raise bench.BenchError("efa-reduced/portable unchanged failed: `efa-image build` exited 1")


def test_a_failing_run_fails_the_bench_and_keeps_the_runs_so_far(tmp_path, monkeypatch, capsys):
    from efa_image.setup import engine

    monkeypatch.setattr(bench, "project_root", lambda: tmp_path)
    monkeypatch.setattr(engine, "ensure_docker", lambda: None)
    monkeypatch.setattr(bench, "machine", lambda: {"cpus": 2})
    monkeypatch.setattr(bench, "Bench", FakeBench)
    assert bench.main(["efa-reduced", "portable"]) == 1
    report = json.loads((tmp_path / "build/bench/efa-reduced-portable.json").read_text())
    assert report["failed"].startswith("efa-reduced/portable unchanged failed")
    assert report["runs"]["cold"]["seconds"] == 600
    assert report["bumped"] == {"nccl_wheel": {"from": "2.30.4", "to": "2.30.3"}}
    assert report["targets_met"] is False
    captured = capsys.readouterr()
    assert "bench: error: efa-reduced/portable unchanged failed" in captured.err
    assert "| efa-reduced/portable | 600 s |" in captured.out


def test_unknown_profile_fails_before_any_build(tmp_path, monkeypatch, capsys):
    from efa_image.setup import engine

    monkeypatch.setattr(bench, "project_root", lambda: tmp_path)
    monkeypatch.setattr(engine, "ensure_docker", lambda: None)
    assert bench.main(["efa-reduced", "nonesuch"]) == 1
    assert "unknown profile 'nonesuch'" in capsys.readouterr().err


def test_other_options_go_to_efa_image_build():
    args, rest = bench.parse_args(
        ["efa-reduced", "portable", "--mirror", "/m", "--skip", "doc", "--extra-var", "a=b"]
    )
    assert args.mirror == "/m" and args.skip == ["doc"]
    assert rest == ["--extra-var", "a=b"]


# The fresh machine and the bench's registry -----------------------------------------

BLOB = "/v2/test/blobs/sha256:c5f05f5ecf52c9ae3dbc9898dacf43c5885ca5edd1eaa03b344f53d41f71e0fd"
# Lines docker-registry 2.8.2 (Debian 12) wrote with its access log on, answering curl:
# the access log on stdout, its own messages (here with GET in them) on stderr.
ACCESS_LOG = "\n".join(
    [
        'time="2026-12-04T20:10:37.725860861Z" level=warning msg="No HTTP secret provided '
        '- generated random secret." go.version=go1.19.8 version=2.8.2+ds1',
        '127.0.0.1 - - [04/Dec/2026:20:10:39 +0000] "GET /v2/ HTTP/1.1" 200 2 "" "curl/7.88.1"',
        '127.0.0.1 - - [04/Dec/2026:20:10:39 +0000] "POST /v2/test/blobs/uploads/ HTTP/1.1" '
        '202 0 "" "curl/7.88.1"',
        f'127.0.0.1 - - [04/Dec/2026:20:10:44 +0000] "GET {BLOB} HTTP/1.1" 200 100000 "" '
        '"curl/7.88.1"',
        # HEAD: the size a GET would have sent, but nothing moved.
        f'127.0.0.1 - - [04/Dec/2026:20:10:44 +0000] "HEAD {BLOB} HTTP/1.1" 200 0 "" "curl/7.88.1"',
        f'127.0.0.1 - - [04/Dec/2026:20:10:39 +0000] "HEAD {BLOB} HTTP/1.1" 404 157 "" '
        '"curl/7.88.1"',
        f'127.0.0.1 - - [04/Dec/2026:20:10:44 +0000] "GET {BLOB} HTTP/1.1" 206 1000 "" '
        '"curl/7.88.1"',
        'time="2026-12-04T20:10:39.321896784Z" level=error msg="response completed with error" '
        'err.code="manifest unknown" http.request.method=GET http.response.status=404 '
        "http.response.written=96",
        '127.0.0.1 - - [04/Dec/2026:20:10:39 +0000] "GET /v2/test/manifests/latest HTTP/1.1" '
        '404 96 "" "curl/7.88.1"',
        '127.0.0.1 - - [04/Dec/2026:20:10:39 +0000] "GET /v2/_catalog HTTP/1.1" 200 20 '
        '"http://ref" "docker/24.0 go/1.20 \\"quoted\\""',
    ]
)
ACCESS_LOG_GET_BYTES = 2 + 100000 + 1000 + 96 + 20
REG = "127.0.0.1:5000"


def test_registry_bytes_are_the_responses_to_gets():
    assert localregistry.get_bytes(ACCESS_LOG.splitlines()) == ACCESS_LOG_GET_BYTES
    assert localregistry.get_bytes([]) == 0


def test_registry_bytes_between_two_offsets_of_its_log(tmp_path):
    log = tmp_path / localregistry.LOG
    log.write_text(ACCESS_LOG + "\n")
    start = localregistry.log_offset(log)
    with log.open("a") as file:
        file.write(
            f'127.0.0.1 - - [04/Dec/2026:20:11:00 +0000] "GET {BLOB} HTTP/1.1" 200 7 "" ""\n'
        )
    end = localregistry.log_offset(log)
    assert localregistry.bytes_sent(log, start, end) == 7
    assert localregistry.bytes_sent(log, 0, end) == ACCESS_LOG_GET_BYTES + 7
    assert localregistry.bytes_sent(log, end, end) == 0


def test_registry_access_log_only_when_asked(tmp_path):
    # docker-registry logs every request unless its configuration says otherwise.
    assert localregistry.config(tmp_path, 5000)["log"]["accesslog"] == {"disabled": True}
    on = localregistry.config(tmp_path, 5000, access_log=True)
    assert on["log"] == {"level": "warn", "accesslog": {"disabled": False}}


@pytest.mark.skipif(not shutil.which(localregistry.REGISTRY), reason="no docker-registry")
def test_registry_bytes_from_a_real_registry(tmp_path):
    """A blob pushed and read twice: the access log holds both reads, and nothing of the HEAD."""
    blob = os.urandom(123456)
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    directory = tmp_path / "registry"
    with localregistry.local_registry(directory, access_log=True) as address:
        opener = localregistry.OPENER
        blobs = f"http://{address}/v2/bench/blobs"
        upload = opener.open(Request(f"{blobs}/uploads/", method="POST"))
        location = upload.headers["Location"]
        headers = {"Content-Type": "application/octet-stream"}
        opener.open(Request(f"{location}&digest={digest}", blob, headers, method="PUT"))
        log = directory / localregistry.LOG
        start = localregistry.log_offset(log)
        for _ in range(2):
            assert opener.open(f"{blobs}/{digest}").read() == blob
        opener.open(Request(f"{blobs}/{digest}", method="HEAD"))
        # The registry logs a request once its handler returned, which may be a moment
        # after the client has read the whole response.
        deadline = time.monotonic() + 5
        while log.read_bytes()[start:].count(b" HTTP/1.1") < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        end = localregistry.log_offset(log)
        assert localregistry.bytes_sent(log, start, end) == 2 * len(blob)
    quiet = tmp_path / "quiet"
    with localregistry.local_registry(quiet) as address:
        localregistry.OPENER.open(f"http://{address}/v2/").read()
    assert '"GET /v2/ ' not in (quiet / localregistry.LOG).read_text()


def fresh_runs(bump_seconds=184.4):
    runs = {
        **ISSUE_RUNS,
        "doc-one-bump": run("doc-one-bump", 455, 1950),
        "fresh-unchanged": run("fresh-unchanged", 41, 703, details={"registry_bytes": 703 * MB}),
        "fresh-one-bump": run(
            "fresh-one-bump", bump_seconds, 700, details={"registry_bytes": 40 * MB}
        ),
    }
    return runs


def test_ratios_of_the_fresh_machine_against_the_recipe_and_its_cold():
    ratios = bench.compute_ratios(fresh_runs())
    assert ratios["fresh_unchanged_vs_doc_cold"] == pytest.approx(41 / 461, abs=1e-3)
    assert ratios["fresh_one_bump_vs_doc_cold"] == 0.4
    assert ratios["fresh_one_bump_vs_doc_one_bump"] == pytest.approx(184.4 / 455, abs=1e-3)
    assert ratios["fresh_one_bump_vs_cold"] == pytest.approx(184.4 / 606, abs=1e-3)
    for key in ("fresh_unchanged_vs_doc_cold", "fresh_one_bump_vs_doc_one_bump"):
        assert bench.compute_ratios(ISSUE_RUNS)[key] is None
    # No targets for these: they are measured, not judged.
    assert not [t for t in bench.TARGETS if t.key.startswith("fresh")]


def test_table_shows_the_fresh_machine_beside_the_project():
    report = bench.make_report({"names": NAMES}, fresh_runs(), {})
    lines = bench.render_table(report).splitlines()
    project = lines.index(next(line for line in lines if line.startswith("| efa-reduced/portable")))
    fresh = lines[project + 1]
    assert fresh == (
        "| efa-reduced/portable, fresh machine, warm registry | - "
        "| 41.0 s (0.09x doc cold), 703 MB from the registry "
        "| 184 s (0.40x doc cold, 0.41x doc one-bump, 0.30x cold), 40 MB from the registry "
        "| - | - |"
    )


def test_table_says_why_the_fresh_machine_was_left_out():
    skipped = {"fresh-unchanged": "--skip fresh", "fresh-one-bump": "--skip fresh"}
    report = bench.make_report({"names": NAMES}, ISSUE_RUNS, skipped)
    table = bench.render_table(report)
    assert "| efa-reduced/portable, fresh machine, warm registry | skipped: --skip fresh |" in table
    # A fresh-unchanged without its one-bump (which failed) still shows.
    runs = {**ISSUE_RUNS, "fresh-unchanged": run("fresh-unchanged", 41, 703)}
    table = bench.render_table(bench.make_report({"names": NAMES}, runs, {}))
    assert "warm registry | - | 41.0 s (0.09x doc cold) | - | - | - |" in table


def test_project_run_reads_where_a_reused_image_came_from():
    pulled = f"{REG}/efa-image-bench@sha256:" + "a" * 64
    assert bench.project_run("x", "x", 1, {"reused_from": pulled}, BASE).reused_from == pulled
    assert bench.project_run("x", "x", 1, {"reused_from": ""}, BASE).reused_from == ""
    assert bench.project_run("x", "x", 1, {}, BASE).reused_from is None


def reported(name, fingerprint="f1", stages=None, **kwargs):
    details = {"build_report": {"fingerprint": fingerprint, "stages": stages or {}}}
    return run(name, 10, details=details, **kwargs)


def test_fresh_notes_say_where_the_fresh_runs_took_things_from():
    pulled = f"{REG}/efa-image-bench@sha256:" + "a" * 64
    cold = reported("cold")
    cold.details["registry_options"] = bench.publish_options(REG, Path("/c/builds"))
    runs = {
        "cold": cold,
        "fresh-unchanged": reported("fresh-unchanged", reused_from=pulled),
        "fresh-one-bump": reported(
            "fresh-one-bump",
            stages={"fetch": 12.34, "packer build": 90.0},
            build_cache={
                "libfabric": "registry",
                "openmpi": "registry",
                "nccl": "miss",
                "aws_ofi_nccl": "miss",
            },
        ),
    }
    assert bench.fresh_notes(runs) == [
        "cold: also pushed its compiled components and its image to the bench's registry on "
        "loopback, and its time includes that",
        "fresh-one-bump: from the registry: libfabric, openmpi; compiled: nccl, aws_ofi_nccl",
        "fresh-one-bump: 12.3 s of its time fetched the artifacts into its empty cache, as on "
        "a fresh machine (the recipe's context is prepared untimed)",
    ]
    assert bench.fresh_notes({"cold": reported("cold")}) == []


def test_fresh_notes_say_when_fresh_unchanged_did_not_pull():
    def note(**kwargs):
        runs = {"cold": reported("cold"), "fresh-unchanged": reported("fresh-unchanged", **kwargs)}
        (text,) = bench.fresh_notes(runs)
        return text

    assert "its fingerprint differs from the cold run's" in note(reused_from="", fingerprint="f2")
    assert "(the pushed image was not taken)" in note(reused_from="")
    assert note(reused_from="local").startswith("fresh-unchanged: reused a local image")
    assert "does not say where its image came from" in note()


def test_registry_options_of_the_cold_and_fresh_runs():
    assert bench.publish_options(REG, Path("/w/cache/builds")) == [
        "--build-cache", f"/w/cache/builds,oci://{REG}/efa-image-bench-cache",
        "--push", f"{REG}/efa-image-bench",
    ]  # fmt: skip
    assert bench.fresh_options(REG) == [
        "--build-cache", f"oci://{REG}/efa-image-bench-cache",
        "--reuse-from", f"{REG}/efa-image-bench",
    ]  # fmt: skip


def test_project_images_are_the_project_runs_never_the_recipes_or_the_base():
    runs = {
        "cold": run("cold", 1, image="sha256:c"),
        "unchanged": run("unchanged", 1, image="sha256:c"),
        "doc-cold": run("doc-cold", 1, image="efa-image-bench:aws-doc-recipe"),
        "one-bump": run("one-bump", 1, image="sha256:b"),
        "distro-cold": run("distro-cold", 1, image="sha256:base"),
        "fresh-unchanged": run("fresh-unchanged", 1),
    }
    assert bench.project_images(runs, keep=["sha256:base", None]) == ["sha256:c", "sha256:b"]


def git(repo, *args):
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
    )


def test_checkout_is_the_working_tree_as_it_is(tmp_path):
    repo = tmp_path / "repo"
    (repo / "roles/a/tasks").mkdir(parents=True)
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text("build/\n*.log\n")
    (repo / "tracked.txt").write_text("committed")
    (repo / "roles/a/tasks/main.yml").write_text("- name: a\n")
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "gone.txt").write_text("deleted later")
    (repo / "link").symlink_to("tracked.txt")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "c")
    # What is not committed: a change, a new file, a deletion, and files git ignores.
    (repo / "tracked.txt").write_text("changed")
    (repo / "new.yml").write_text("new")
    (repo / "gone.txt").unlink()
    (repo / "build").mkdir()
    (repo / "build/out").write_text("ignored")
    (repo / "debug.log").write_text("ignored")
    dest = bench.make_checkout(repo, tmp_path / "checkout")
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if not p.is_dir())
    assert files == [".gitignore", "link", "new.yml", "roles/a/tasks/main.yml", "run.sh",
                     "tracked.txt"]  # fmt: skip
    assert (dest / "tracked.txt").read_text() == "changed"
    assert os.readlink(dest / "link") == "tracked.txt"
    assert os.access(dest / "run.sh", os.X_OK)
    with pytest.raises(bench.BenchError, match="git ls-files"):
        bench.make_checkout(tmp_path / "checkout", tmp_path / "again")


def test_a_checkout_of_this_project_builds_with_its_own_code(root, tmp_path):
    checkout = bench.make_checkout(root, tmp_path / "checkout")
    assert (checkout / "src/efa_image/paths.py").is_file()
    bench.check_checkout(checkout)
    # A directory without the package would import the virtualenv's: refused.
    (tmp_path / "empty").mkdir()
    with pytest.raises(bench.BenchError, match="would build with efa_image from"):
        bench.check_checkout(tmp_path / "empty")


def test_project_run_from_the_checkout_counts_what_it_took_from_the_registry(
    root, tmp_path, no_docker, monkeypatch
):
    stub = bench.Bench(options(root, tmp_path), tmp_path)
    log = tmp_path / localregistry.LOG
    log.write_text(ACCESS_LOG + "\n")  # the earlier runs'
    stub.registry_log = log
    seen = {}
    pulled = f"{REG}/efa-image-bench@sha256:" + "a" * 64

    def build(argv, env=None, cwd=None):
        seen.update(argv=argv, env=env, cwd=cwd)
        report = {"image": "sha256:abc", "image_bytes": 703 * MB, "reused_from": pulled}
        Path(argv[argv.index("--report") + 1]).write_text(json.dumps(report))
        with log.open("a") as file:
            file.write(f'127.0.0.1 - - [x] "GET {BLOB} HTTP/1.1" 200 {703 * MB} "" "docker"\n')

    monkeypatch.setattr(bench, "_stream", build)
    checkout, cache = tmp_path / "checkout", tmp_path / "fresh-cache"
    fresh = bench.fresh_options(REG)
    got = stub.project("fresh-one-bump", "portable", cache, False, True, fresh, checkout)
    assert seen["cwd"] == checkout
    assert seen["env"] == {
        "EFA_IMAGE_CACHE": str(cache),
        "EFA_IMAGE_BUILD_CACHE": str(cache / "builds"),
        "PYTHONPATH": str(checkout / "src"),
        "EFA_IMAGE_ROOT": str(checkout),
    }
    argv = seen["argv"]
    assert argv[:4] == [sys.executable, "-m", "efa_image", "build"]
    assert argv[argv.index("--lock-overlay") + 1] == str(checkout / bench.BUMP_OVERLAY)
    assert argv[-4:] == fresh and "--rebuild" not in argv
    assert got.details["registry_bytes"] == 703 * MB
    assert got.details["registry_options"] == fresh
    assert got.reused_from == pulled
    # Without the registry: the first checkout, no bytes counted.
    stub.registry_log = None
    got = stub.project("cold", "portable", tmp_path / "cache", True, False)
    assert seen["cwd"] == root and "PYTHONPATH" not in seen["env"]
    assert "--rebuild" in seen["argv"] and "registry_bytes" not in got.details


def test_removing_the_project_images_forces_them_out_and_fails_if_one_stays(
    root, tmp_path, no_docker, monkeypatch
):
    from efa_image.building import base

    present = {"efa-image/base:debian13": "sha256:base", "sha256:c": "sha256:c"}
    present["sha256:b"] = "sha256:b"
    removed = []

    def docker_rm(argv, **kwargs):
        removed.append(argv[-1])
        if argv[-1] != "sha256:stuck":
            present.pop(argv[-1], None)
        return subprocess.CompletedProcess(argv, 1, "", "image is in use by a container")

    stub = bench.Bench(options(root, tmp_path), tmp_path)
    monkeypatch.setattr(base, "image_id", present.get)
    monkeypatch.setattr(bench.subprocess, "run", docker_rm)
    stub.runs = {
        "cold": run("cold", 1, image="sha256:c"),
        "unchanged": run("unchanged", 1, image="sha256:c"),
        "distro-cold": run("distro-cold", 1, image="sha256:base"),
        "one-bump": run("one-bump", 1, image="sha256:b"),
    }
    stub.remove_project_images()
    assert removed == ["sha256:c", "sha256:b"]
    assert "efa-image/base:debian13" in present
    present["sha256:stuck"] = "sha256:stuck"
    stub.runs["fresh-unchanged"] = run("fresh-unchanged", 1, image="sha256:stuck")
    with pytest.raises(bench.BenchError, match=r"could not remove sha256:stuck .*in use"):
        stub.remove_project_images()
