"""The bench's report: ratios, targets, table, and the recipe kept in step with the lock.

No docker: the builds are stubbed; what is tested is what the numbers become.
"""

import json
import re
from pathlib import Path

import pytest

import benchmark as bench
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
        self.profiles = profiles
        super().__init__(options, work)

    def project(self, name, profile, cache, cold, bump):
        self.calls.append((name, profile, cache.name, cold, bump))
        return run(name, 10, 700)

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


def options(root, skip=()):
    return bench.Options(
        "efa-reduced", "portable", "efa-image/base:debian13", None, [], set(skip), root, root
    )


@pytest.fixture
def no_docker(monkeypatch):
    from efa_image.building import base

    monkeypatch.setattr(base, "ensure_ref", lambda ref, store=None: f"{ref}: present")
    monkeypatch.setattr(bench, "image_size", lambda ref: BASE)


def test_bench_runs_in_order_with_isolated_cold_caches(root, tmp_path, no_docker):
    stub = StubBench(options(root), tmp_path)
    stub.all()
    names = [call[0] for call in stub.calls]
    assert names == [
        "cold", "unchanged", "doc-cold", "doc-unchanged",
        "seed", "one-bump", "doc-one-bump", "distro-cold",
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


def test_bench_states_why_runs_were_left_out(root, tmp_path, no_docker):
    stub = StubBench(options(root, skip={"doc", "one-bump"}), tmp_path, profiles=("portable",))
    stub.all()
    assert [call[0] for call in stub.calls] == ["cold", "unchanged"]
    assert stub.skipped["doc-cold"] == "--skip doc"
    assert stub.skipped["one-bump"] == "--skip one-bump"
    assert "no profile 'distro'" in stub.skipped["distro-cold"]


def test_bench_can_leave_out_only_the_recipes_one_bump(root, tmp_path, no_docker):
    stub = StubBench(options(root, skip={"doc-one-bump", "distro"}), tmp_path)
    stub.all()
    names = [call[0] for call in stub.calls]
    assert names == ["cold", "unchanged", "doc-cold", "doc-unchanged", "seed", "one-bump"]
    assert stub.skipped == {"doc-one-bump": "--skip doc-one-bump", "distro-cold": "--skip distro"}


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
