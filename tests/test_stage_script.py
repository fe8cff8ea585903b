import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGE = str(ROOT / "scripts" / "stage")


def run(log, *args):
    return subprocess.run(
        [STAGE, *args],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "EFA_IMAGE_STAGE_LOG": str(log)},
    )


def test_records_each_stage_and_sums_them(tmp_path):
    log = tmp_path / "stages.tsv"
    assert run(log, "first", "true").returncode == 0
    assert run(log, "second", "sleep", "0.2").returncode == 0
    summary = run(log, "--summary").stdout.splitlines()
    assert summary[0] == "stage durations:"
    assert [line.split()[0] for line in summary[1:]] == ["first", "second", "total"]
    assert float(summary[2].split()[1].rstrip("s")) >= 0.2


def test_failure_keeps_exit_code_and_prints_summary(tmp_path):
    log = tmp_path / "stages.tsv"
    proc = run(log, "broken", "sh", "-c", "exit 7")
    assert proc.returncode == 7
    assert "<== stage broken: failed (exit 7)" in proc.stdout
    assert "stage durations:" in proc.stdout


def test_pytest_without_tests_is_reported_as_empty_not_failed(tmp_path):
    log = tmp_path / "stages.tsv"
    proc = run(log, "--pytest", "unit", "sh", "-c", "exit 5")
    assert proc.returncode == 0
    assert "empty (no tests collected)" in log.read_text()
    # Other failures of a pytest stage still fail.
    assert run(log, "--pytest", "unit", "sh", "-c", "exit 1").returncode == 1


def test_reset_forgets_earlier_stages(tmp_path):
    log = tmp_path / "stages.tsv"
    run(log, "old", "true")
    run(log, "--reset")
    assert run(log, "--summary").stdout == ""


def test_skipped_stage_is_listed_with_its_reason(tmp_path):
    log = tmp_path / "stages.tsv"
    proc = run(log, "--skip", "molecule:x", "the mirror lacks y")
    assert proc.returncode == 0 and "skipped: the mirror lacks y" in proc.stdout
    assert "skipped: the mirror lacks y" in run(log, "--summary").stdout


def test_wall_clock_counts_from_reset_for_stages_side_by_side(tmp_path):
    log = tmp_path / "stages.tsv"
    assert run(log, "--reset").returncode == 0
    lanes = [
        subprocess.Popen(
            [STAGE, name, "sleep", "0.5"],
            env={"PATH": "/usr/bin:/bin", "EFA_IMAGE_STAGE_LOG": str(log)},
            stdout=subprocess.DEVNULL,
        )
        for name in ("lane-a", "lane-b")
    ]
    assert [lane.wait() for lane in lanes] == [0, 0]
    lines = {line.split()[0]: line for line in run(log, "--summary").stdout.splitlines()[1:]}
    assert {"lane-a", "lane-b", "total", "wall"} <= set(lines)
    total, wall = (float(lines[k].split()[-1].rstrip("s")) for k in ("total", "wall"))
    assert total >= 1.0 and 0.5 <= wall < total


def test_summary_ends_with_each_failed_stages_error_lines(tmp_path):
    log = tmp_path / "stages.tsv"
    run(log, "--reset")
    error = "\x1b[31mfatal: [host]: FAILED! => no space left\x1b[0m"
    script = f"echo building; echo '{error}'; echo recap; exit 2"
    assert run(log, "molecule:role/default", "sh", "-c", script).returncode == 2
    assert run(log, "fine", "echo", "fatal: words in a stage that passed").returncode == 0
    lines = run(log, "--summary").stdout.splitlines()
    saved = tmp_path / "stages.tsv.d" / "molecule_role_default.log"
    assert "building" in saved.read_text()
    assert re.fullmatch(
        rf"stage molecule:role/default failed \(exit 2\) after [0-9.]+s; its output: {saved}",
        lines[-3],
    )
    assert lines[-2:] == [
        "    fatal: [host]: FAILED! => no space left",
        "failed stages: molecule:role/default",
    ]


def test_failed_stage_without_error_lines_shows_its_last_lines(tmp_path):
    log = tmp_path / "stages.tsv"
    run(log, "--reset")
    assert run(log, "quiet", "sh", "-c", "seq 1 20; exit 1").returncode == 1
    lines = run(log, "--summary").stdout.splitlines()
    assert lines[-9:-1] == [f"    {n}" for n in range(13, 21)]
    assert lines[-1] == "failed stages: quiet"


def test_reset_removes_earlier_stage_outputs(tmp_path):
    log = tmp_path / "stages.tsv"
    run(log, "old", "sh", "-c", "exit 1")
    run(log, "--reset")
    assert not (tmp_path / "stages.tsv.d").exists()
    assert run(log, "--summary").stdout == ""


def test_summary_gives_the_machines_cpu_time_since_reset(tmp_path):
    """All processes' CPU time (/proc/stat), at least what the stage itself burnt."""
    log = tmp_path / "stages.tsv"
    assert run(log, "--reset").returncode == 0
    burn = "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"
    assert run(log, "burn", "sh", "-c", burn).returncode == 0
    lines = run(log, "--summary").stdout.splitlines()
    line = next(line for line in lines if line.split()[:2] == ["cpu", "busy"])
    match = re.fullmatch(r"\s+cpu busy\s+([\d.]+)s  CPU time, (\d+) % of (\d+) cores", line)
    assert match, line
    busy, percent, cores = float(match[1]), int(match[2]), int(match[3])
    wall = float(next(x for x in lines if x.split()[0] == "wall").split()[-1].rstrip("s"))
    # /proc/stat's counters lag on this VM over a window this short (a make test
    # saw 1.5 busy CPU-s in 0.6 s of wall clock on 2 cores while its unit tests ran
    # beside it), so the bound allows half a second of lag: counting a field twice
    # would still exceed it.
    assert 0.05 <= busy <= wall * cores + 0.5 and 0 < percent <= 100 and cores >= 1
