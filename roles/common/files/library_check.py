"""What the roles' library checks share, and the way they run on the target.

A role's check script (roles/metis/files/metis_check.py,
roles/gdrcopy/files/gdrcopy_check.py) imports this module as `library_check`.
Both go to the target as text in one command, so nothing is copied there:

    python3 -c "$(cat library_check.py)" "$(cat metis_check.py)" --library libmetis.so ...

Run so, this module takes its first argument as the script, makes itself
importable as `library_check` and runs the script as __main__ with the rest
of the arguments. Here: PYTHONPATH=roles/common/files python3 metis_check.py ...

Standard library only: it runs in the target's system Python, before or
without anything else of the image.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys


def dlopen(name: str, problems: list[str]) -> ctypes.CDLL | None:
    """The library `name` loads as (a bare name through ld.so's cache, a path as it is);
    None, and why in `problems`, where it does not load."""
    try:
        return ctypes.CDLL(name)
    except OSError as exc:
        problems.append(f"dlopen({name}) failed: {exc}")
        return None


def loaded_path(name: str) -> str | None:
    """The file the dynamic linker mapped for the library (after symlinks)."""
    stem = os.path.basename(name).split(".so")[0]
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split(maxsplit=5)[-1].strip()
            if path.startswith("/") and os.path.basename(path).startswith(stem + ".so"):
                return os.path.realpath(path)
    return None


def header_define(text: str, name: str) -> str | None:
    """The number a C header's `#define NAME <digits>` gives, None where it has none."""
    match = re.search(rf"^\s*#define\s+{name}\s+(\d+)\s*$", text, re.MULTILINE)
    return match.group(1) if match else None


def run_script(argv: list[str]) -> None:
    """Run argv[1], a check script's text, as __main__ with argv[2:] as its arguments."""
    if len(argv) < 2:
        sys.exit('usage: python3 -c "<library_check.py>" "<check script>" ARGUMENTS...')
    sys.modules.setdefault("library_check", sys.modules[__name__])
    script = argv[1]
    sys.argv = [argv[0], *argv[2:]]
    exec(compile(script, "<check script>", "exec"), {"__name__": "__main__"})


if __name__ == "__main__":
    run_script(sys.argv)
