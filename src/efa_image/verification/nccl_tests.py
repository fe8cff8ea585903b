"""Parse NVIDIA nccl-tests output (all_reduce_perf and friends) and judge its bus bandwidth.

A passing nccl-tests run is the end-to-end proof that NCCL, the aws-ofi-nccl
plugin and libfabric work together over EFA; its bus bandwidth says whether they
work at speed. Versions differ in small ways (redop/root columns missing in old
tests, `N/A` in #wrong when validation is off, launcher prefixes), so rows are
recognised by shape rather than by column position.

Bandwidth floors live in data/nccl_busbw.yml as {instance_type: {nodes_N: GB/s}}.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from efa_image.datafiles import read_yaml
from efa_image.errors import EfaImageError
from efa_image.types import Finding

HEADER_KEYS = ("nThread", "nGpus", "minBytes", "maxBytes")
# Prefixes launchers add: Open MPI --tag-output, srun --label, ISO or bracketed timestamps.
PREFIX = re.compile(
    r"^\s*(?:\[\d+,\d+\]<std(?:out|err)>:|\d+:\s|\[[^\]]*\]\s?"
    r"|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\s)"
)
DEVICE = re.compile(
    r"#\s*Rank\s+(\d+)\s+Group\s+(\d+)\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)"
    r"\s+\[([^\]]*)\]\s*(.*)"
)
AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
OUT_OF_BOUNDS = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)\s+(\w+)")
TROUBLE = re.compile(r"error|fail|abort|segmentation|killed", re.IGNORECASE)
DEFAULT_THRESHOLDS = "nccl_busbw.yml"
PLATEAU_BYTES = 1 << 30


class ParseError(EfaImageError, ValueError):
    """The text holds no nccl-tests results (the test crashed or never started)."""


@dataclass(frozen=True)
class Measurement:
    time_us: float
    algbw: float
    busbw: float
    wrong: int | None  # None: `N/A` (validation off) or the old max-error column


@dataclass(frozen=True)
class Row:
    size: int
    count: int
    type: str
    redop: str
    root: int | None
    out_of_place: Measurement
    in_place: Measurement


@dataclass(frozen=True)
class Device:
    rank: int
    group: int
    pid: int
    hostname: str
    device: int
    bus_id: str
    name: str


@dataclass
class PerfRun:
    """One all_reduce_perf run as parsed from its output: rows, ranks, the summary."""

    rows: list[Row] = field(default_factory=list)
    devices: list[Device] = field(default_factory=list)
    header: dict[str, int] = field(default_factory=dict)
    avg_busbw: float | None = None
    out_of_bounds: int | None = None
    out_of_bounds_ok: bool | None = None

    @property
    def ok(self) -> bool:
        """Ran, and nothing came back wrong or out of bounds."""
        wrong = any((m.wrong or 0) > 0 for r in self.rows for m in (r.out_of_place, r.in_place))
        return self.out_of_bounds == 0 and bool(self.rows) and not wrong

    @property
    def hostnames(self) -> set[str]:
        return {d.hostname for d in self.devices}

    @property
    def largest(self) -> Row | None:
        return max(self.rows, key=lambda r: r.size, default=None)


def _strip_prefix(line: str) -> str:
    for _ in range(3):
        stripped = PREFIX.sub("", line, count=1)
        if stripped == line:
            break
        line = stripped
    return line


def _measurement(tokens: list[str]) -> Measurement:
    wrong: int | None = None
    if tokens[3] != "N/A":
        try:
            wrong = int(tokens[3])
        except ValueError:
            float(tokens[3])  # the old `error` column: a max error, not a count
    return Measurement(float(tokens[0]), float(tokens[1]), float(tokens[2]), wrong)


def _row(line: str) -> Row | None:
    tokens = line.split()
    if len(tokens) < 11 or not tokens[0].isdigit():
        return None
    lead, values = tokens[:-8], tokens[-8:]
    if not 3 <= len(lead) <= 5 or not lead[1].isdigit() or lead[2].lstrip("-").isdigit():
        return None
    extra = lead[3:]
    redop, root = "", None
    try:
        if len(extra) == 2:
            redop, root = extra[0], int(extra[1])
        elif extra and extra[0].lstrip("-").isdigit():
            root = int(extra[0])
        elif extra:
            redop = extra[0]
        out_of_place, in_place = _measurement(values[:4]), _measurement(values[4:])
    except ValueError:
        return None
    return Row(int(lead[0]), int(lead[1]), lead[2], redop, root, out_of_place, in_place)


def parse(text: str) -> PerfRun:
    """Parse one nccl-tests run; raises ParseError if it holds no results at all."""
    result = PerfRun()
    for raw in text.splitlines():
        line = _strip_prefix(raw).strip()
        if not line.startswith("#"):
            if (row := _row(line)) is not None:
                result.rows.append(row)
            continue
        if match := DEVICE.match(line):
            rank, group, pid, host, dev, bus, name = match.groups()
            result.devices.append(
                Device(int(rank), int(group), int(pid), host, int(dev), bus, name.strip())
            )
        elif match := AVG.match(line):
            result.avg_busbw = float(match.group(1))
        elif match := OUT_OF_BOUNDS.match(line):
            result.out_of_bounds = int(match.group(1))
            result.out_of_bounds_ok = match.group(2).upper() == "OK"
        elif "nThread" in line:
            for key in HEADER_KEYS:
                if found := re.search(rf"\b{key}\s+(\d+)", line):
                    result.header[key] = int(found.group(1))
    if not result.rows and result.avg_busbw is None:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        clue = next((line for line in lines if TROUBLE.search(line)), lines[-1] if lines else "")
        raise ParseError(
            "no nccl-tests result rows and no 'Avg bus bandwidth' line: the test failed "
            "before measuring" + (f"; first sign of trouble: {clue}" if clue else "; no output")
        )
    return result


# One node with NCCL's P2P, SHM and NVLS off: every byte crosses the node's own NICs.
NETWORK_KEY = "network_1"
# What makes NCCL carry a single node's traffic through the net plugin.
NETWORK_ONLY_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}


def _load_table(path: Path | str | None) -> tuple[dict[Any, Any], str]:
    data, where = read_yaml(DEFAULT_THRESHOLDS, path, EfaImageError)
    data = data or {}
    if not isinstance(data, dict):
        raise EfaImageError(f"{where}: expected a mapping of instance type -> floors")
    for instance, floors in data.items():
        if not isinstance(floors, dict) or not floors:
            raise EfaImageError(f"{where}: {instance}: expected {{nodes_1: GBPS, nodes_2: ...}}")
        for key, value in floors.items():
            nodes = str(key).removeprefix("nodes_")
            known = nodes.isdigit() or key == NETWORK_KEY
            if not known or isinstance(value, bool) or not isinstance(value, int | float):
                raise EfaImageError(
                    f"{where}: {instance}.{key}: expected nodes_N: number or {NETWORK_KEY}: number"
                )
    return data, where


def load_thresholds(path: Path | str | None = None) -> dict[str, dict[int, float]]:
    """Read {instance_type: {nodes_N: min busbw GB/s}}; the packaged table by default."""
    data, _ = _load_table(path)
    return {
        str(instance): {
            int(str(key).removeprefix("nodes_")): float(value)
            for key, value in floors.items()
            if key != NETWORK_KEY
        }
        for instance, floors in data.items()
    }


def load_network_floors(path: Path | str | None = None) -> dict[str, float]:
    """{instance_type: min busbw GB/s} of one node through the network (network_1)."""
    data, _ = _load_table(path)
    return {
        str(instance): float(floors[NETWORK_KEY])
        for instance, floors in data.items()
        if NETWORK_KEY in floors
    }


def check_network_bandwidth(
    result: PerfRun, instance_type: str, floors: Mapping[str, float] | None = None
) -> Finding:
    """One node, NCCL's traffic forced through the net plugin (NETWORK_ONLY_ENV): the
    busbw of the largest size against the instance's network_1 floor."""
    table = load_network_floors() if floors is None else floors
    check = "nccl busbw through the network"
    largest = result.largest
    if instance_type not in table:
        return Finding(
            check,
            False,
            f"no {NETWORK_KEY} floor for {instance_type}: add it to data/{DEFAULT_THRESHOLDS}",
        )
    if largest is None:
        return Finding(check, False, "no per-size rows in the output to compare")
    busbw, floor = largest.in_place.busbw, table[instance_type]
    ok = busbw >= floor
    return Finding(
        check,
        ok,
        f"busbw {busbw:g} GB/s at {largest.size} B (in-place, P2P, SHM and NVLS off) "
        f"{'>=' if ok else '<'} floor {floor:g} GB/s for {instance_type} on one node",
    )


def _floor(floors: float | Mapping[int, float], nodes: int) -> float | None:
    if not isinstance(floors, Mapping):
        return float(floors)
    if nodes in floors:
        return floors[nodes]
    # Across nodes busbw is bound by EFA, so N nodes take the nearest multi-node floor below.
    below = [n for n in floors if 2 <= n <= nodes]
    return floors[max(below)] if below and nodes >= 2 else None


def check_bandwidth(
    result: PerfRun,
    instance_type: str,
    thresholds: Mapping[str, float | Mapping[int, float]] | None = None,
    nodes: int | None = None,
) -> Finding:
    """Compare the in-place busbw of the largest message size with the instance's floor.

    The largest size is what people quote and compare: small sizes measure latency,
    and the average over all sizes depends on the size range chosen. The node count
    comes from the hosts in the device list unless given. A thresholds value may be a
    plain number (one floor, e.g. from --threshold) or {nodes: floor}.
    """
    table = load_thresholds() if thresholds is None else thresholds
    check = "nccl busbw"
    if instance_type not in table:
        known = ", ".join(sorted(table)) or "none"
        return Finding(
            check,
            False,
            f"no busbw floor for {instance_type} (known: {known}); add "
            f"'{instance_type}: {{nodes_1: GBPS, nodes_2: GBPS}}' to data/{DEFAULT_THRESHOLDS} "
            "or pass --threshold GBPS",
        )
    largest = result.largest
    if largest is None:
        return Finding(check, False, "no per-size rows in the output to compare")
    count = nodes or len(result.hostnames)
    floor = _floor(table[instance_type], count) if count else None
    if floor is None:
        why = f"{count} node(s)" if count else "an unknown node count (no device lines)"
        return Finding(check, False, f"no busbw floor for {instance_type} at {why}")
    busbw = largest.in_place.busbw
    ok = busbw >= floor
    detail = (
        f"busbw {busbw:g} GB/s at {largest.size} B (in-place) {'>=' if ok else '<'} "
        f"floor {floor:g} GB/s for {instance_type}, {count} node(s)"
    )
    if largest.size < PLATEAU_BYTES:
        detail += "; largest size is under 1 GiB, run with -e 8G for a comparable figure"
    return Finding(check, ok, detail)
