"""GDRCopy in an image (as AWS's sanity script checks it) and the host's gdrdrv.

The image's part runs where the manifest lists gdrcopy: libgdrapi.so.<major>
and libgdrapi.so in the linker cache (aws-ofi-nccl dlopens "libgdrapi.so"),
`ldd` without "not found", ctypes loads it and resolves gdr_open and
gdr_pin_buffer (not called: gdr_open needs the host's kernel module),
gdrapi.h and gdrconfig.h present, and the header's version is the manifest's.

The host's part (HARDWARE): the kernel module gdrdrv comes with a GPU host's
NVIDIA driver stack, never with an image. Where /sys/module/gdrdrv/version
exists, a module older than the image's library draws a warning: aws-ofi-nccl
takes min(libgdrapi, gdrdrv) as GDRCopy's version (aws/aws-ofi-nccl#1350), so
GPU-initiated networking, which needs 2.5 in both, fails there. Without the
module the finding is a note, never a pass.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from typing import Protocol

from efa_image.types import Finding

GDRDRV_VERSION = "/sys/module/gdrdrv/version"
# aws-ofi-nccl's GPU-initiated networking (GIN) needs GDRCopy 2.5 in library and driver.
GIN_MINIMUM = (2, 5)
NOT_LOADED = "gdrdrv not loaded (HARDWARE: GPU hosts only)"
# AWS's check: load it and resolve both, without calling gdr_open.
RESOLVE = (
    "import ctypes; lib = ctypes.CDLL('libgdrapi.so');"
    " print(bool(lib.gdr_open) and bool(lib.gdr_pin_buffer))"
)


class Output(Protocol):
    rc: int
    stdout: str
    stderr: str


Run = Callable[[str], Output]


def parse_version(text: str) -> tuple[int, int] | None:
    """MAJOR.MINOR of a GDRCopy or gdrdrv version: "2.6", "2.5.1", "v2.4.4\\n"."""
    match = re.match(r"^\s*v?(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def header_version(text: str) -> tuple[int, int] | None:
    """GDR_API_MAJOR_VERSION and GDR_API_MINOR_VERSION that gdrapi.h defines."""
    found = {
        name: re.search(rf"(?m)^\s*#define\s+GDR_API_{name}_VERSION\s+(\d+)\s*$", text or "")
        for name in ("MAJOR", "MINOR")
    }
    if not all(found.values()):
        return None
    return int(found["MAJOR"].group(1)), int(found["MINOR"].group(1))


def dotted(version: tuple[int, int]) -> str:
    return ".".join(map(str, version))


def gdrdrv_finding(driver: str | None, library: str) -> Finding:
    """The host's gdrdrv against the image's libgdrapi: three outcomes.

    driver is the content of /sys/module/gdrdrv/version, None where the module
    is not loaded: a note, never a pass. Older than the library: a warning (a
    note that says so; NCCL still runs, with the older version's features).
    The same or newer: passed.
    """
    check = "gdrdrv (host)"
    if driver is None:
        return Finding(check, None, NOT_LOADED)
    have, want = parse_version(driver), parse_version(library)
    if have is None or want is None:
        return Finding(
            check, None, f"warning: cannot compare gdrdrv {driver.strip()!r} with {library!r}"
        )
    if have < want:
        gin = (
            f"; GPU-initiated networking needs {dotted(GIN_MINIMUM)} in both, so it is off here"
            if have < GIN_MINIMUM <= want
            else ""
        )
        return Finding(
            check,
            None,
            f"warning: the host's gdrdrv {dotted(have)} is older than the image's libgdrapi "
            f"{dotted(want)}: aws-ofi-nccl uses the older (aws/aws-ofi-nccl#1350){gin}; update "
            "the host's gdrdrv",
        )
    return Finding(
        check, True, f"gdrdrv {dotted(have)} loaded, not older than libgdrapi {dotted(want)}"
    )


def read_gdrdrv(run: Run) -> str | None:
    """/sys/module/gdrdrv/version (the host kernel's, also seen from containers), or None."""
    found = run(f"cat {GDRDRV_VERSION} 2>/dev/null")
    return found.stdout.strip() if found.rc == 0 and found.stdout.strip() else None


def cached(linker_cache: str, name: str) -> list[str]:
    """Paths that `ldconfig -p` gives for a library name."""
    pattern = rf"(?m)^\s*{re.escape(name)} \(.*=> (\S+)$"
    return re.findall(pattern, linker_cache)


def image_findings(run: Run, component: dict) -> list[Finding]:
    """AWS's sanity checks of GDRCopy at the prefix the manifest records."""
    version = str(component.get("version", ""))
    want = parse_version(version)
    prefix = str(component.get("prefix") or "/opt/gdrcopy").rstrip("/")
    major = want[0] if want else 2
    findings = []

    cache = run("ldconfig -p").stdout
    paths = {name: cached(cache, name) for name in (f"libgdrapi.so.{major}", "libgdrapi.so")}
    missing = [name for name, where in paths.items() if not where]
    findings.append(
        Finding(
            "gdrcopy linker cache",
            not missing,
            f"not listed: {', '.join(missing)}"
            if missing
            else "; ".join(f"{n} => {', '.join(w)}" for n, w in paths.items()),
        )
    )

    library = (paths[f"libgdrapi.so.{major}"] or [f"{prefix}/lib/libgdrapi.so.{major}"])[0]
    ldd = run(f"ldd {shlex.quote(library)}")
    unresolved = [line.split()[0] for line in ldd.stdout.splitlines() if "not found" in line]
    findings.append(
        Finding(
            "gdrcopy shared libraries",
            ldd.rc == 0 and not unresolved,
            f"not found: {', '.join(unresolved)}"
            if unresolved
            else (f"{library}: all resolved" if ldd.rc == 0 else f"ldd {library} failed"),
        )
    )

    resolved = run(f"python3 -c {shlex.quote(RESOLVE)}")
    findings.append(
        Finding(
            "gdrcopy symbols",
            resolved.rc == 0 and resolved.stdout.strip() == "True",
            "ctypes loaded libgdrapi.so, gdr_open and gdr_pin_buffer resolved"
            if resolved.rc == 0 and resolved.stdout.strip() == "True"
            else f"ctypes: {(resolved.stderr.strip().splitlines() or ['no result'])[-1]}",
        )
    )

    include = f"{prefix}/include"
    absent = [h for h in ("gdrapi.h", "gdrconfig.h") if run(f"test -f {include}/{h}").rc != 0]
    header = header_version(run(f"cat {include}/gdrapi.h").stdout)
    findings.append(
        Finding(
            "gdrcopy headers",
            not absent and header is not None and header == want,
            f"missing in {include}: {', '.join(absent)}"
            if absent
            else f"gdrapi.h {dotted(header) if header else 'without a version'}, "
            f"manifest {version or '?'}",
        )
    )
    return findings
