"""Packer: the variables of a build, `packer build` itself, and what its output says.

Packer runs the flavour's playbook through its ansible provisioner; this module
reads back the image it committed, the failed Ansible task, the per-role
durations and the build cache's answers from that output.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

from efa_image.building.images import CUDA_HOMES, DEFAULT_PATH
from efa_image.errors import EfaImageError
from efa_image.paths import default_cache_dir
from efa_image.runner import CommandError, run_command
from efa_image.types import BuildRequest

ANSI = re.compile(r"\x1b\[[0-9;]*m")
PACKER_PREFIX = re.compile(r"^\s*(?:==> )?docker\.image:\s?")
ROLE_TIME = re.compile(r"^(\S+) -+ (\d+(?:\.\d+)?)s$")
CACHE_LINE = re.compile(r"build cache: ([a-z0-9_.-]+) [0-9a-f]{16} (hit|registry|miss|off)\b")


def packer_vars(
    request: BuildRequest,
    versions: dict[str, str],
    path: str = "",
    owner: str = "manual",
    cuda_home: str = "",
    fingerprint: str = "",
    manifest: str = "",
    allow_unpinned: bool = False,
    env: dict[str, str] | None = None,
    path_extra: list[str] | None = None,
) -> dict[str, object]:
    """The variables of packer/variables.pkr.hcl for one build.

    `allow_unpinned`: the store's --allow-unpinned, which the roles then share
    (artifact_allow_unpinned), so the controller and Ansible accept the same artifacts.
    """
    labels = {f"org.efa-image.component.{name}": v for name, v in versions.items()}
    return {
        "flavor": request.flavor,
        "profile": request.profile,
        "base_image": request.base_image,
        "base_path": path or DEFAULT_PATH,
        "image_repository": request.repository,
        "labels": labels,
        "mirror": request.mirror or "",
        "lock_overlay": ":".join(request.overlays),
        "build_cache": request.build_cache,
        # The docker source mounts it: wheels are linked, not copied in.
        "artifact_cache": str(default_cache_dir()),
        "ansible_extra_vars": list(request.extra_vars),
        "build_owner": owner,
        "cuda_home": cuda_home or CUDA_HOMES[0],
        "fingerprint": fingerprint,
        "manifest": manifest,
        "allow_unpinned": allow_unpinned,
        "image_env": env or {},
        "image_path": path_extra or [],
    }


def packer_build(root: Path, var_file: Path, manifest: Path) -> tuple[str, str]:
    """Run `packer build` on the docker source; Ansible's own error when a role fails.

    Returns the committed image and Packer's output.
    """
    try:
        completed = run_command(
            [
                "packer",
                "build",
                "-only=docker.image",
                f"-var-file={var_file}",
                str(root / "packer"),
            ],
            stream=True,
            cwd=root,
            # Packer's ansible provisioner runs the ansible-playbook of this environment.
            env={"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"},
        )
    except CommandError as exc:
        failure = ansible_failure(exc.output)
        raise EfaImageError(
            "packer build failed; no image was committed or tagged"
            + (f". Ansible reported:\n{failure}" if failure else f": {exc}")
        ) from exc
    return built_image_id(manifest), completed.output


def built_image_id(manifest: Path) -> str:
    """The docker image of Packer's last run, from its manifest post-processor."""
    try:
        data = json.loads(manifest.read_text())
    except FileNotFoundError as exc:
        raise EfaImageError(f"packer wrote no manifest ({manifest})") from exc
    run_uuid = data.get("last_run_uuid")
    for build in data.get("builds", []):
        if build.get("packer_run_uuid") == run_uuid and build.get("builder_type") == "docker":
            return str(build["artifact_id"])
    raise EfaImageError(f"{manifest} names no docker image of the last run ({run_uuid})")


def _plain_lines(output: str) -> list[str]:
    """Packer's output without colours and without its `docker.image:` prefix."""
    return [PACKER_PREFIX.sub("", ANSI.sub("", line)) for line in output.splitlines()]


def ansible_failure(output: str, limit: int = 40) -> str | None:
    """The failed task as Ansible reported it inside Packer's output, if any."""
    lines = _plain_lines(output)
    failed = [i for i, line in enumerate(lines) if "fatal: [" in line or "failed: [" in line]
    if not failed:
        return None
    start = max((i for i in range(failed[-1]) if lines[i].startswith("TASK [")), default=0)
    block = [line for line in lines[start : failed[-1] + 1] if line.strip()]
    return "\n".join(block[-limit:])


def role_durations(output: str) -> dict[str, float]:
    """Per-role seconds from the ROLES RECAP of ansible.posix.profile_roles."""
    lines = [line.strip() for line in _plain_lines(output)]
    start = max((i for i, line in enumerate(lines) if "ROLES RECAP" in line), default=None)
    if start is None:
        return {}
    durations = {}
    for line in lines[start:]:
        if (match := ROLE_TIME.match(line)) and match.group(1) != "total":
            durations[match.group(1)] = float(match.group(2))
    return durations


def build_cache_outcomes(output: str) -> dict[str, str]:
    """Per component, what the build cache answered (the roles' `build cache:` lines)."""
    return {m.group(1): m.group(2) for m in CACHE_LINE.finditer(ANSI.sub("", output))}
