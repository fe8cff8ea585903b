"""Filters of the pytorch role: which wheels a target's Python takes, and the
compatibility rules (efa_image.compat.rules, the same rules `efa-image build` and
`efa-image verify` apply) on what the role measured in the image."""

from __future__ import annotations

import re
from typing import Any

from ansible.errors import AnsibleFilterError

# name-version[-build]-python-abi-platform.whl
WHEEL_TAGS = re.compile(r"-(?P<python>[^-]+)-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl$")


def _tags(filename: str) -> re.Match[str]:
    match = WHEEL_TAGS.search(filename)
    if match is None:
        raise AnsibleFilterError(f"{filename!r} is not a wheel file name")
    return match


def _python_fits(tag: str, abi: str, major: int, minor: int) -> bool:
    """One python tag (py3, py311, cp311; cp38 with abi3 for any later 3.x)."""
    if tag in (f"py{major}", f"py{major}{minor}", f"cp{major}{minor}"):
        return True
    found = re.fullmatch(rf"cp{major}(\d+)", tag)
    return abi == "abi3" and found is not None and int(found.group(1)) <= minor


def _machine_fits(platform: str, machine: str) -> bool:
    return platform == "any" or any(p.endswith(f"_{machine}") for p in platform.split("."))


def unsupported_wheels(filenames: list[str], python_version: str, machine: str) -> list[str]:
    """The wheels that `python_version` ('3.11') on `machine` ('x86_64') cannot install."""
    major, minor = (int(part) for part in str(python_version).split(".")[:2])
    refused = []
    for filename in filenames:
        tags = _tags(filename)
        pythons, abis = tags.group("python").split("."), tags.group("abi").split(".")
        fits = any(_python_fits(p, a, major, minor) for p in pythons for a in abis)
        if not fits or not _machine_fits(tags.group("platform"), machine):
            refused.append(filename)
    return refused


def wheel_pythons(filenames: list[str]) -> list[str]:
    """The CPython versions a set's interpreter-specific wheels are for ('cp311' -> '3.11')."""
    found = set()
    for filename in filenames:
        for tag in _tags(filename).group("python").split("."):
            if match := re.fullmatch(r"cp(\d)(\d+)", tag):
                found.add(f"{match.group(1)}.{match.group(2)}")
    return sorted(found) or ["any"]


def nccl_version(code: Any) -> str:
    """ncclGetVersion's code as 'X.Y.Z'."""
    from efa_image.compat import rules

    return rules.nccl_version_from_code(int(code))


def compatibility(facts: dict[str, Any]) -> dict[str, list[str]]:
    """Every rule of efa_image/data/compatibility.yml on `facts`: violations (with the
    rule's fix and reference), passed rule ids, and skipped ones with why."""
    try:
        from efa_image.compat import rules
    except ImportError as exc:
        raise AnsibleFilterError(
            "pytorch_compatibility needs the efa_image package in Ansible's Python: "
            "run ansible from the project's virtualenv (make setup)"
        ) from exc
    result = rules.check(facts)
    return {
        "violations": [f"{v.rule}: {v.message} ({v.reference})" for v in result.violations],
        "passed": list(result.passed),
        "skipped": [f"{s.rule}: {s.why}" for s in result.skipped],
    }


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "pytorch_unsupported_wheels": unsupported_wheels,
            "pytorch_wheel_pythons": wheel_pythons,
            "pytorch_nccl_version": nccl_version,
            "pytorch_compatibility": compatibility,
        }
