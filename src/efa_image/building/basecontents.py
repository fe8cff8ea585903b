"""What a base image already holds, and which roles then use it instead of installing.

`efa-image build --base-image IMAGE` on an image that has components (an AWS Deep
Learning Container, or an image this project built) runs one probe in a
throw-away container of it (data/base-contents-probe.sh, as efa_image.building.distro
probes the distribution's libfabric): this project's manifest and install
prefixes, and the DLC layout. Each component of the flavour found there gets the
role's `present` method (an extra variable): the role verifies and records it
(origin base in the manifest) and installs nothing; only what is missing is
installed. `--no-detect` builds as on a bare base.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from efa_image.errors import EfaImageError
from efa_image.runner import run_command

PROBE = Path(__file__).parents[1] / "data" / "base-contents-probe.sh"

# role -> the extra variables of its present method, from what the probe found.
# openmpi's libfabric is the base's when efa is present (the prefix it was built on).
PRESENT_ROLES = ("efa", "openmpi", "nccl", "aws_ofi_nccl", "pytorch")
# Roles the probe can find but that have no present method yet: the build refuses
# rather than install a second copy over the base's.
NO_PRESENT_METHOD = ("metis", "rmm")
# The version key (tags, labels, verification) of a present component.
VERSION_KEYS = {
    "efa": "libfabric",
    "openmpi": "openmpi",
    "nccl": "nccl",
    "aws_ofi_nccl": "aws_ofi_nccl",
    "pytorch": "pytorch",
}


@dataclass(frozen=True)
class Found:
    """One component in the base: where, which version, and who recorded it."""

    name: str
    prefix: str = ""
    version: str = ""
    # efa-image: this project's manifest lists it; probe: found by its files alone.
    recorded_by: str = "probe"
    detail: dict[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        where = self.prefix or self.detail.get("python") or self.detail.get("library", "")
        version = f"{self.version} " if self.version else ""
        extra = (
            f", EFA installer {self.detail['installer']}" if self.detail.get("installer") else ""
        )
        return f"{self.name} ({version}in {where}{extra}; {self.recorded_by})"


def parse_probe(output: str) -> dict[str, Found]:
    """The probe's `<component> <key> <value>` lines (and `manifest <json>`)."""
    facts: dict[str, dict[str, str]] = {}
    manifest: dict = {}
    for line in output.splitlines():
        if line.startswith("manifest "):
            try:
                manifest = json.loads(line.split(" ", 1)[1])
            except json.JSONDecodeError:
                manifest = {}
            continue
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[2]:
            facts.setdefault(parts[0], {})[parts[1]] = parts[2].strip()
    recorded = {c.get("name") for c in manifest.get("components", []) if isinstance(c, dict)}
    found = {}
    for name, values in facts.items():
        if name == "efa" and "prefix" not in values:
            continue  # an installer record without a libfabric that runs is not EFA
        prefix = values.pop("prefix", "")
        version = values.pop("version", "")
        if name == "pytorch":
            version = version.split("+", 1)[0]
        origin = "efa-image manifest" if name in recorded else "probe"
        found[name] = Found(name, prefix, version, origin, values)
    return found


def probe(image: str) -> dict[str, Found]:
    """Run the probe in a throw-away container of the base image."""
    shell = ["docker", "run", "--rm", "--entrypoint", "/bin/sh", image]
    return parse_probe(run_command([*shell, "-c", PROBE.read_text(), "probe"]).output)


@dataclass
class BaseUse:
    """Which of the flavour's roles use the base's component (present) and which install."""

    present: dict[str, Found] = field(default_factory=dict)
    install: list[str] = field(default_factory=list)

    def extra_vars(self) -> tuple[str, ...]:
        variables: dict[str, str] = {}
        for name, found in self.present.items():
            variables[f"{name}_method"] = "present"
            if name == "pytorch":
                variables["pytorch_python"] = found.detail["python"]
            else:
                variables[f"{name}_prefix"] = found.prefix
        if "openmpi" in self.present and "efa" in self.present:
            variables["openmpi_libfabric_prefix"] = self.present["efa"].prefix
        return tuple(f"{key}={value}" for key, value in variables.items())

    def versions(self) -> dict[str, str]:
        """The present components' versions, keyed like the lock's artifacts."""
        return {
            VERSION_KEYS[name]: found.version
            for name, found in self.present.items()
            if found.version
        }

    def report(self) -> dict[str, dict]:
        return {name: asdict(found) for name, found in self.present.items()}

    def render(self, image: str) -> str:
        if not self.present:
            kept = f"base image {image} holds none of the flavour's components"
        else:
            kept = (
                f"base image {image} has "
                + ", ".join(found.describe() for found in self.present.values())
                + ": verified and recorded (origin base), not installed"
            )
        return kept + "\n" + "to install: " + (", ".join(self.install) or "nothing")


def base_use(
    found: dict[str, Found], roles: list[str], locked: dict[str, str] | None = None
) -> BaseUse:
    """present for every role of the flavour whose component the base has.

    `locked`: the lock's versions; a base PyTorch must be the pinned one (what
    smdistributed and the wheel sets are built against). Refuses, before
    anything is built, where the base has a component whose role cannot use it.
    """
    locked = locked or {}
    result = BaseUse()
    for role in roles:
        if role in found and role in NO_PRESENT_METHOD:
            raise EfaImageError(
                f"the base image already has {found[role].describe()}, and the {role} role "
                "has no present method yet (it would install a second copy beside it): build "
                "with --no-detect to install it anyway, or use a flavour without it"
            )
        if role in found and role in PRESENT_ROLES:
            result.present[role] = found[role]
        else:
            result.install.append(role)
    torch = result.present.get("pytorch")
    if torch and locked.get("pytorch") and torch.version != locked["pytorch"]:
        raise EfaImageError(
            f"the base image's PyTorch is {torch.version} ({torch.detail.get('python')}), the "
            f"lock pins {locked['pytorch']}: pin that release (`efa-image lock update pytorch` "
            "with resolve.requirements torch==" + torch.version + "), or build with --no-detect "
            "to install the lock's beside it"
        )
    return result
