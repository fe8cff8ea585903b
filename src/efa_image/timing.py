"""Named, timed steps: every long action prints what it does and how long it took."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple


class Step(NamedTuple):
    """One timed step; outcome ok or failed."""

    name: str
    seconds: float
    outcome: str


@dataclass
class StepTimer:
    """Collects the steps of a command for a summary at its end."""

    prefix: str
    steps: list[Step] = field(default_factory=list)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        print(f"==> {self.prefix}: {name}", flush=True)
        start = time.monotonic()
        outcome = "failed"
        try:
            yield
            outcome = "ok"
        finally:
            seconds = time.monotonic() - start
            self.steps.append(Step(name, seconds, outcome))
            print(f"<== {self.prefix}: {name}: {outcome} in {seconds:.1f}s", flush=True)

    def summary(self) -> str:
        width = max((len(name) for name, _, _ in self.steps), default=0)
        lines = [f"{self.prefix} durations:"]
        lines += [f"  {name:<{width}}  {secs:7.1f}s  {out}" for name, secs, out in self.steps]
        lines.append(f"  {'total':<{width}}  {sum(s for _, s, _ in self.steps):7.1f}s")
        return "\n".join(lines)
