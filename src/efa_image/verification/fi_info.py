"""Parse what libfabric's `fi_info` prints.

Handles the default listing (`fi_info -p efa`: blocks that start at
`provider:`, indented or not), the provider list (`fi_info -l`), the version
(`fi_info --version`) and the `fi_getinfo: -61 (No data available)` failure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FIELDS = ("provider", "fabric", "domain", "version", "type", "protocol")
GETINFO_ERROR = re.compile(r"fi_getinfo:\s*(-?\d+)\s*\(([^)]*)\)")


@dataclass(frozen=True)
class Endpoint:
    """One block of `fi_info` output: a provider offering an endpoint type."""

    provider: str
    fabric: str = ""
    domain: str = ""
    version: str = ""
    type: str = ""
    protocol: str = ""
    extra: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def providers(self) -> list[str]:
        """`efa;ofi_rxd` is the efa provider layered under ofi_rxd."""
        return self.provider.split(";")


def _key_value(line: str) -> tuple[str, str] | None:
    key, sep, value = line.strip().partition(":")
    if not sep or not key or " " in key:
        return None
    return key.strip(), value.strip()


def parse_endpoints(text: str) -> list[Endpoint]:
    blocks: list[dict[str, str]] = []
    for line in text.splitlines():
        pair = _key_value(line)
        if pair is None:
            continue
        key, value = pair
        if key == "provider":
            blocks.append({"provider": value})
        elif blocks:
            blocks[-1].setdefault(key, value)
    return [
        Endpoint(
            **{k: block.get(k, "") for k in FIELDS},
            extra={k: v for k, v in block.items() if k not in FIELDS},
        )
        for block in blocks
    ]


def parse_provider_list(text: str) -> dict[str, str]:
    """`fi_info -l`: provider name -> its version ('' if not printed)."""
    providers: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace() and line.rstrip().endswith(":"):
            current = line.strip()[:-1]
            providers[current] = ""
        elif current and (pair := _key_value(line)) and pair[0] == "version":
            providers[current] = pair[1]
    return providers


def parse_version(text: str) -> dict[str, str]:
    """`fi_info --version`: {'fi_info': '2.1.0', 'libfabric': '2.1.0', 'libfabric api': '2.1'}."""
    versions = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip():
            # fi_info names itself by the path it was run as.
            versions[key.strip().rsplit("/", 1)[-1]] = value.strip()
    return versions


def getinfo_error(text: str) -> tuple[int, str] | None:
    """The (code, reason) of `fi_getinfo: -61 (No data available)`, if printed."""
    match = GETINFO_ERROR.search(text)
    return (int(match.group(1)), match.group(2)) if match else None
