"""The end of make test: which steps failed, with their first error line, and every step's time.

`python tools/stepsummary.py LOGS STEP...` reads what scripts/step left in
LOGS (NAME.log, NAME.status) for each STEP make test runs. make test goes on
past a failed step (make -k) and prints this last, so one failure does not
hide the state of the rest. Exit status 1 when a step failed or did not run.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

TIMING = re.compile(r"^==> (?P<step>\S+): (?P<wall>[\d.]+)s wall")
COLOUR = re.compile(r"\x1b\[[0-9;]*m")
# The frame molecule draws around Ansible's output ("  │ fatal: ...").
FRAME = re.compile(r"^\s*│\s?")
# The first line that says what went wrong, by the tool that said it; most telling first.
ERROR_LINES = (
    re.compile(r"^FAILED \S+"),  # pytest's short summary: the test and its assertion
    re.compile(r"^ERROR \S+"),  # pytest: a fixture or collection error
    re.compile(r"^(fatal|failed): \["),  # Ansible (molecule's frame taken off)
    re.compile(r"^efa-image: error: "),
    re.compile(r"^\S+:\d+:\d+: [A-Z]+\d+ "),  # ruff (concise), yamllint's path:line:col
    re.compile(r"^\s+\d+:\d+\s+error\s"),  # yamllint (standard)
    re.compile(r"^E\s{3}\S"),  # pytest's E lines, where no summary was printed
    re.compile(r"\b(error|Error|ERROR|FAILED|failed)\b"),
)


@dataclass(frozen=True)
class Step:
    name: str
    status: int | None  # None: it never ran
    wall: float | None
    first_error: str = ""
    skipped: str = ""


def first_error_line(lines: list[str]) -> str:
    """The line that names the failure; the last line of output where none does."""
    plain = (FRAME.sub("", COLOUR.sub("", line)) for line in lines)
    body = [line for line in plain if not TIMING.match(line)]
    for pattern in ERROR_LINES:
        for line in body:
            if pattern.search(line):
                return line.strip()
    return next((line.strip() for line in reversed(body) if line.strip()), "(no output)")


def read_step(logs: Path, name: str) -> Step:
    file = name.replace("/", "+")
    status_file, log_file = logs / f"{file}.status", logs / f"{file}.log"
    if not status_file.is_file():
        return Step(name, None, None)
    status = int(status_file.read_text().strip() or "1")
    lines = log_file.read_text(errors="replace").splitlines() if log_file.is_file() else []
    walls = [float(m["wall"]) for line in lines if (m := TIMING.match(line))]
    wall = sum(walls) if walls else None
    skipped = next((line for line in lines if line.startswith("skipped: ")), "")
    return Step(name, status, wall, first_error_line(lines) if status else "", skipped)


def summary(steps: list[Step]) -> str:
    def seconds(step: Step) -> str:
        return "-" if step.wall is None else f"{step.wall:.0f}s"

    width = max(len(step.name) for step in steps)
    out = ["", "make test: the steps, slowest first"]
    ran = sorted((s for s in steps if s.status is not None), key=lambda s: -(s.wall or 0))
    for step in ran:
        state = "ok" if step.status == 0 else f"FAILED ({step.status})"
        if step.skipped:
            state = step.skipped
        out.append(f"  {step.name:{width}}  {seconds(step):>6}  {state}")
    failed = [s for s in steps if s.status]
    never = [s for s in steps if s.status is None]
    for step in never:
        out.append(f"  {step.name:{width}}  {'-':>6}  not run: a step it waits for failed")
    if failed or never:
        out.append(f"make test: {len(failed)} failed, {len(never)} not run")
        out += [f"  {s.name}: {s.first_error}" for s in failed]
    else:
        out.append(f"make test: all {len(steps)} steps passed")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    logs, names = Path(argv[0]), list(dict.fromkeys(argv[1:]))
    steps = [read_step(logs, name) for name in names]
    print(summary(steps))
    return 1 if any(step.status != 0 for step in steps) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
