"""Install records of compiled components, and the decision whether to build.

A component built from an archive (libfabric, Open MPI, NCCL, aws-ofi-nccl,
nccl-tests, ...) is described by its inputs: the archive's version and sha256,
the build steps (configure and make options), the checksums of the libraries
it links against, the CUDA version. The record written after a successful
build holds exactly those inputs; the next build compares them whole, so any
changed input rebuilds and nothing else does. The same inputs are the build
cache's key (efa_image.building.build_cache).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FORMAT = 2


@dataclass(frozen=True)
class Decision:
    build: bool
    reasons: list[str] = field(default_factory=list)

    def render(self, component: str) -> str:
        if not self.build:
            return f"{component}: installed build matches its inputs; nothing to build"
        return f"{component}: build ({'; '.join(self.reasons)})"


def record(component: str, inputs: Mapping[str, Any]) -> str:
    """The record's text: written last, after the build passed its checks."""
    body = {"format": FORMAT, "component": component, "inputs": normalize(inputs)}
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


def normalize(value: Any) -> Any:
    """JSON's view of the inputs (tuples are lists, keys are strings), so records compare."""
    return json.loads(json.dumps(value, sort_keys=True))


def parse(text: str | None) -> dict[str, Any] | None:
    """The recorded inputs, or None when there is no usable record."""
    if not text or not text.strip():
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    inputs = data.get("inputs")
    return inputs if isinstance(inputs, dict) else None


def decide(recorded_text: str | None, wanted: Mapping[str, Any], force: bool = False) -> Decision:
    """Build when forced, when nothing usable is recorded, or when any input differs."""
    reasons = ["forced"] if force else []
    recorded = parse(recorded_text)
    if recorded is None:
        missing = "not installed" if not recorded_text else "record unreadable or of an old format"
        return Decision(True, [*reasons, missing])
    reasons += differences(recorded, normalize(wanted))
    return Decision(bool(reasons), reasons)


def differences(old: Any, new: Any, path: str = "") -> list[str]:
    """One line per input that differs, named by its dotted path."""
    if isinstance(old, dict) and isinstance(new, dict):
        found = []
        for key in sorted(set(old) | set(new)):
            where = f"{path}.{key}" if path else str(key)
            if key not in old:
                found.append(f"{where} added ({short(new[key])})")
            elif key not in new:
                found.append(f"{where} removed (was {short(old[key])})")
            else:
                found += differences(old[key], new[key], where)
        return found
    if old != new:
        return [f"{path or 'inputs'} changed: {short(old)} -> {short(new)}"]
    return []


def short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."
