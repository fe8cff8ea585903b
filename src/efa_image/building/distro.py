"""The distribution's libfabric package in a base image, judged before a build.

With the efa role's package method the image's libfabric is whatever the base
image's distribution packages: `efa-image build` asks the base image (as it
asks it for CUDA) which version apt would install and whether it has the EFA
provider, with the script and the arguments the role's preflight uses
(roles/common/files/package-probe.sh with the efa role's _efa_package_probe_*
variables): nothing is installed, the apt lists are fetched into the
throw-away container when the base has none. The compatibility rules then
judge that version like a built one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

from efa_image.paths import project_root
from efa_image.runner import run_command

PROBE = project_root() / "roles" / "common" / "files" / "package-probe.sh"
EFA_VARS = project_root() / "roles" / "efa" / "vars"


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


def probe_arguments() -> list[str]:
    """PACKAGE MEMBER NAME=CHECK...: the efa role's own (vars/Debian.yml, vars/main.yml)."""
    package = yaml.safe_load((EFA_VARS / "Debian.yml").read_text())["_efa_package_libfabric"]
    own = yaml.safe_load((EFA_VARS / "main.yml").read_text())
    checks = [f"{name}={check}" for name, check in own["_efa_package_probe_checks"].items()]
    return [package, own["_efa_package_probe_member"], *checks]


def probe_libfabric(image: str) -> DistroLibfabric:
    """Run the role's probe in a throw-away container of the base image."""
    shell = ["docker", "run", "--rm", "--entrypoint", "/bin/sh", image]
    argv = [*shell, "-c", PROBE.read_text(), "probe", *probe_arguments()]
    return parse_probe(run_command(argv).output)


def probe_for(image: str, methods: dict[str, str]) -> DistroLibfabric | None:
    """The probe where the profile installs the distribution's libfabric, else None."""
    return probe_libfabric(image) if methods.get("efa") == "package" else None
