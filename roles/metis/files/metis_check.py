"""Check an installed METIS by what it does, not by its file names.

    PYTHONPATH=roles/common/files python3 metis_check.py --library libmetis.so \
        --header /opt/metis/include/metis.h --width 32 --version 5.1.0

--library is given to dlopen as it is: a bare name resolves as a program's
NEEDED entry does (ld.so's cache), a path loads that file. Prints one JSON
object (what was found, and "problems") and exits 0 only when there are none:

- metis.h declares IDXTYPEWIDTH --width and METIS_VER_* --version;
- the library's own index width is --width: METIS_SetDefaultOptions writes
  METIS_NOPTIONS idx_t values of -1, so it fills 40 or 80 of 80 int32 slots;
- METIS_PartGraphKway, with idx_t of --width bits, cuts two 5-cliques joined
  by one edge into its two cliques (edge cut 1), the only optimal bisection.

Standard library only, with roles/common/files/library_check.py (dlopen,
loaded_path, header_define): it runs in the target's system Python, before or without
anything else of the image, as `python3 -c "<library_check.py>" "<this script>"
ARGUMENTS...` (the role's vars/main.yml).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from typing import Any

from library_check import dlopen, header_define, loaded_path

NOPTIONS = 40
SENTINEL = 0x5A5A5A5A
METIS_OK = 1
# Two 5-cliques, vertices 0-4 and 5-9, joined by the edge 4-5.
CLIQUES = (range(5), range(5, 10))
BRIDGE = (4, 5)


def graph() -> tuple[list[int], list[int]]:
    """The graph in METIS's CSR form (xadj, adjncy)."""
    neighbours: dict[int, list[int]] = {v: [] for clique in CLIQUES for v in clique}
    for clique in CLIQUES:
        for v in clique:
            neighbours[v].extend(u for u in clique if u != v)
    a, b = BRIDGE
    neighbours[a].append(b)
    neighbours[b].append(a)
    xadj, adjncy = [0], []
    for v in sorted(neighbours):
        adjncy.extend(sorted(neighbours[v]))
        xadj.append(len(adjncy))
    return xadj, adjncy


def header_facts(text: str) -> dict[str, int | str | None]:
    """IDXTYPEWIDTH, REALTYPEWIDTH and the version that metis.h defines."""
    parts = [header_define(text, f"METIS_VER_{p}") for p in ("MAJOR", "MINOR", "SUBMINOR")]
    width, real = header_define(text, "IDXTYPEWIDTH"), header_define(text, "REALTYPEWIDTH")
    return {
        "header_idx_width": int(width) if width else None,
        "header_real_width": int(real) if real else None,
        "header_version": ".".join(parts) if all(parts) else None,
    }


def library_width(library: ctypes.CDLL) -> int | None:
    slots = (ctypes.c_int32 * (2 * NOPTIONS))(*([SENTINEL] * (2 * NOPTIONS)))
    library.METIS_SetDefaultOptions.restype = ctypes.c_int
    if library.METIS_SetDefaultOptions(slots) != METIS_OK:
        return None
    written = [value == -1 for value in slots]
    if all(written[:NOPTIONS]) and not any(written[NOPTIONS:]):
        return 32
    if all(written):
        return 64
    return None


def partition(library: ctypes.CDLL, width: int) -> dict[str, Any]:
    idx = ctypes.c_int32 if width == 32 else ctypes.c_int64
    xadj, adjncy = graph()
    nvtxs = len(xadj) - 1
    part = (idx * nvtxs)()
    edgecut = idx(-1)
    function = library.METIS_PartGraphKway
    function.restype = ctypes.c_int
    status = function(
        ctypes.byref(idx(nvtxs)),  # nvtxs
        ctypes.byref(idx(1)),  # ncon
        (idx * len(xadj))(*xadj),
        (idx * len(adjncy))(*adjncy),
        None,  # vwgt
        None,  # vsize
        None,  # adjwgt
        ctypes.byref(idx(2)),  # nparts
        None,  # tpwgts
        None,  # ubvec
        None,  # options: METIS's defaults
        ctypes.byref(edgecut),
        part,
    )
    return {"status": status, "edgecut": edgecut.value, "part": list(part)}


def partition_problems(result: dict[str, Any]) -> list[str]:
    part = result["part"]
    sides = [{part[v] for v in clique} for clique in CLIQUES]
    if result["status"] != METIS_OK:
        return [f"METIS_PartGraphKway returned {result['status']}, not METIS_OK"]
    if result["edgecut"] != 1 or any(len(s) != 1 for s in sides) or sides[0] == sides[1]:
        return [
            f"METIS_PartGraphKway split two 5-cliques joined by one edge into {part}"
            f" (edge cut {result['edgecut']}), not one part per clique (edge cut 1)"
        ]
    return []


def check(library_name: str, header: str, width: int, version: str) -> dict[str, Any]:
    facts: dict[str, Any] = {"library": library_name, "header": header}
    problems: list[str] = []
    try:
        with open(header) as text:
            facts.update(header_facts(text.read()))
    except OSError as exc:
        problems.append(f"cannot read {header}: {exc.strerror}")
    else:
        if facts["header_idx_width"] != width:
            problems.append(f"{header} has IDXTYPEWIDTH {facts['header_idx_width']}, not {width}")
        if facts["header_version"] != version:
            problems.append(f"{header} is METIS {facts['header_version']}, not {version}")
    library = dlopen(library_name, problems)
    if library is None:
        return {**facts, "problems": problems}
    facts["loaded"] = loaded_path(library_name)
    facts["library_idx_width"] = library_width(library)
    if facts["library_idx_width"] != width:
        problems.append(
            f"{facts['loaded']} fills options[] as idx_t of {facts['library_idx_width']} bits,"
            f" not {width}"
        )
    else:
        facts["partition"] = partition(library, width)
        problems.extend(partition_problems(facts["partition"]))
    return {**facts, "problems": problems}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--library", required=True)
    parser.add_argument("--header", required=True)
    parser.add_argument("--width", type=int, choices=(32, 64), required=True)
    parser.add_argument("--version", required=True)
    options = parser.parse_args(argv)
    result = check(options.library, options.header, options.width, options.version)
    print(json.dumps(result, sort_keys=True))
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
