"""The distribution's libfabric package in a base image, judged before a build.

With the efa role's package method the image's libfabric is whatever the base
image's distribution packages: `efa-image build` asks the base image (as it
asks it for CUDA) which version apt would install and whether it has the EFA
provider, with the same script the role's preflight runs
(roles/efa/files/libfabric-package-probe.sh): nothing is installed, the apt
lists are fetched into the throw-away container when the base has none. The
compatibility rules then judge that version like a built one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from efa_image.paths import project_root
from efa_image.runner import run_command

PROBE = project_root() / "roles" / "efa" / "files" / "libfabric-package-probe.sh"
PACKAGE = "libfabric1"


@dataclass(frozen=True)
class DistroLibfabric:
    """apt's libfabric in the base image: Debian version ("" when there is none), EFA built in."""

    package_version: str = ""
    efa: bool = False
    source: str = ""  # installed, candidate, none

    @property
    def version(self) -> str:
        """The upstream release: '2.1.0-1.1' -> '2.1.0', '1:1.17.0-3' -> '1.17.0'."""
        match = re.match(r"^(?:\d+:)?(\d+(?:\.\d+)*)", self.package_version)
        return match.group(1) if match else ""


def parse_probe(output: str) -> DistroLibfabric:
    found = dict(line.split(" ", 1) for line in output.splitlines() if " " in line)
    return DistroLibfabric(
        found.get("version", ""), found.get("efa") == "yes", found.get("source", "")
    )


def probe_libfabric(image: str, package: str = PACKAGE) -> DistroLibfabric:
    """Run the role's probe in a throw-away container of the base image."""
    shell = ["docker", "run", "--rm", "--entrypoint", "/bin/sh", image]
    return parse_probe(run_command([*shell, "-c", PROBE.read_text(), "probe", package]).output)


def probe_for(image: str, methods: dict[str, str]) -> DistroLibfabric | None:
    """The probe where the profile installs the distribution's libfabric, else None."""
    return probe_libfabric(image) if methods.get("efa") == "package" else None
