"""Check an installed GDRCopy userspace library as AWS's sanity script does.

    PYTHONPATH=roles/common/files python3 gdrcopy_check.py --library libgdrapi.so \
        --include /opt/gdrcopy/include --version 2.6

--library is given to dlopen as it is: a bare name resolves as aws-ofi-nccl's
dlopen("libgdrapi.so") does (ld.so's cache), a path loads that file. Prints one
JSON object (what was found, and "problems") and exits 0 only when there are
none:

- gdrapi.h and gdrconfig.h are in --include, and gdrapi.h's
  GDR_API_MAJOR_VERSION.GDR_API_MINOR_VERSION is --version's major.minor;
- the library loads and resolves gdr_open and gdr_pin_buffer (AWS's check) and
  the two version functions aws-ofi-nccl resolves; none of them that needs the
  gdrdrv kernel module is called (gdr_open opens /dev/gdrdrv, the host's);
- gdr_runtime_get_version, which needs no driver, reports that version too.

Standard library only, with roles/common/files/library_check.py (dlopen,
loaded_path, header_define): it runs in the target's system Python, before or without
anything else of the image, as `python3 -c "<library_check.py>" "<this script>"
ARGUMENTS...` (the role's vars/main.yml).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import sys
from typing import Any

from library_check import dlopen, header_define, loaded_path

HEADERS = ("gdrapi.h", "gdrconfig.h")
# gdr_open and gdr_pin_buffer: AWS's check_nccl_efa_gdrcopy.sh; the version
# functions: aws-ofi-nccl's nccl_ofi_gdrcopy.cpp resolves them at start.
SYMBOLS = ("gdr_open", "gdr_pin_buffer", "gdr_runtime_get_version", "gdr_driver_get_version")


def major_minor(version: str) -> str | None:
    """The API version a release carries: 2.6 -> 2.6, 2.5.1 -> 2.5, v2.4.4 -> 2.4."""
    match = re.match(r"^v?(\d+)\.(\d+)", version.strip())
    return f"{int(match.group(1))}.{int(match.group(2))}" if match else None


def header_version(text: str) -> str | None:
    """GDR_API_MAJOR_VERSION.GDR_API_MINOR_VERSION that gdrapi.h defines."""
    major = header_define(text, "GDR_API_MAJOR_VERSION")
    minor = header_define(text, "GDR_API_MINOR_VERSION")
    return f"{int(major)}.{int(minor)}" if major and minor else None


def runtime_version(library: ctypes.CDLL) -> str:
    major, minor = ctypes.c_int(-1), ctypes.c_int(-1)
    library.gdr_runtime_get_version.restype = None
    library.gdr_runtime_get_version(ctypes.byref(major), ctypes.byref(minor))
    return f"{major.value}.{minor.value}"


def check(library_name: str, include: str, version: str) -> dict[str, Any]:
    want = major_minor(version)
    facts: dict[str, Any] = {"library": library_name, "include": include, "want": want}
    problems: list[str] = []
    if want is None:
        problems.append(f"--version {version} is not MAJOR.MINOR[.PATCH]")
    for name in HEADERS:
        if not os.path.isfile(os.path.join(include, name)):
            problems.append(f"{os.path.join(include, name)} is missing")
    try:
        with open(os.path.join(include, "gdrapi.h")) as text:
            facts["header_version"] = header_version(text.read())
    except OSError:
        facts["header_version"] = None
    else:
        if facts["header_version"] != want:
            problems.append(
                f"{include}/gdrapi.h declares GDR_API version {facts['header_version']}, not {want}"
            )
    library = dlopen(library_name, problems)
    if library is None:
        return {**facts, "problems": problems}
    facts["loaded"] = loaded_path(library_name)
    missing = [name for name in SYMBOLS if not hasattr(library, name)]
    facts["symbols"] = {name: name not in missing for name in SYMBOLS}
    if missing:
        problems.append(f"{facts['loaded'] or library_name} lacks {', '.join(missing)}")
    if "gdr_runtime_get_version" not in missing:
        facts["runtime_version"] = runtime_version(library)
        if facts["runtime_version"] != want:
            problems.append(
                f"gdr_runtime_get_version() reports {facts['runtime_version']}, not {want}"
            )
    return {**facts, "problems": problems}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--library", required=True)
    parser.add_argument("--include", required=True)
    parser.add_argument("--version", required=True)
    options = parser.parse_args(argv)
    result = check(options.library, options.include, options.version)
    print(json.dumps(result, sort_keys=True))
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
