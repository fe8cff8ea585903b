"""Docker images and containers of a build: base PATH, CUDA, size, ENV, stale containers.

What `efa-image build` asks docker about the base image before Packer starts,
about the built image afterwards, and which build containers an interrupted
build left behind.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from efa_image.runner import CommandError, run_command
from efa_image.verification import verify

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Where nvcc lives: NVIDIA's layout (nvidia/cuda) first, then Debian's nvidia-cuda-toolkit.
CUDA_HOMES = ("/usr/local/cuda", "/usr/lib/nvidia-cuda-toolkit")
CUDA_PROBE = (
    'for d in "$@"; do if [ -x "$d/bin/nvcc" ]; then echo "home $d"; '
    '"$d/bin/nvcc" --version | sed -n "s/.*release \\([0-9.]*\\),.*/version \\1/p"; '
    "exit 0; fi; done; "
    # Runtime images have no nvcc; NVIDIA's set CUDA_VERSION.
    'if [ -n "${CUDA_VERSION:-}" ]; then echo "version $CUDA_VERSION"; fi'
)
# Packer names its build container with this prefix and labels it with the owning
# build (packer/sources.pkr.hcl).
BUILD_CONTAINER_PREFIX = "efa-image-build-"
OWNER_LABEL = "org.efa-image.build-owner"


def inspect(ref: str, template: str) -> str:
    """`docker image inspect --format TEMPLATE` of one image."""
    return run_command(["docker", "image", "inspect", "--format", template, ref]).output


def image_id(ref: str) -> str:
    return inspect(ref, "{{.Id}}").strip()


def labels(ref: str) -> dict[str, str]:
    """The labels of a local image."""
    return json.loads(inspect(ref, "{{json .Config.Labels}}") or "null") or {}


def label(ref: str, name: str) -> str | None:
    """One label of a local image; None when the image or the label is absent."""
    try:
        return labels(ref).get(name)
    except CommandError:
        return None


def repo_tags(ref: str) -> list[str]:
    """Every REPOSITORY:TAG of a local image."""
    return json.loads(inspect(ref, "{{json .RepoTags}}") or "null") or []


def repo_digests(ref: str) -> list[str]:
    """REPOSITORY@sha256:... of a local image, one per registry it was pushed to or pulled from."""
    return json.loads(inspect(ref, "{{json .RepoDigests}}") or "null") or []


def image_env(ref: str) -> list[str]:
    """The image's ENV as NAME=VALUE items."""
    return json.loads(inspect(ref, "{{json .Config.Env}}") or "null") or []


def base_path(image: str) -> str:
    """The PATH the base image sets (nvidia/cuda adds /usr/local/cuda/bin, for one)."""
    for item in image_env(image):
        if item.startswith("PATH="):
            return item[len("PATH=") :]
    return DEFAULT_PATH


def image_size(ref: str) -> int:
    return int(inspect(ref, "{{.Size}}").strip())


@dataclass(frozen=True)
class BaseCuda:
    """CUDA in the base image: where nvcc lives and which version it is ("" when none)."""

    home: str = ""
    version: str = ""

    @property
    def major(self) -> str:
        return self.version.split(".")[0] if self.version else ""


def probe_cuda(image: str) -> BaseCuda:
    """NVIDIA's layout (nvidia/cuda) or Debian's nvidia-cuda-toolkit, found by nvcc."""
    shell = ["docker", "run", "--rm", "--entrypoint", "/bin/sh", image]
    result = run_command([*shell, "-c", CUDA_PROBE, "probe", *CUDA_HOMES])
    found = dict(line.split(" ", 1) for line in result.output.splitlines() if " " in line)
    return BaseCuda(found.get("home", ""), found.get("version", ""))


def env_mismatches(items: list[str], described: list[dict[str, object]]) -> list[str]:
    """Where the image's ENV items differ from what the roles wrote to /opt/efa-image/env.d/."""
    env = dict(item.split("=", 1) for item in items)
    path = env.get("PATH", "").split(":")
    problems = []
    for record in described:
        for directory in record.get("path", []):  # type: ignore[union-attr]
            if directory not in path:
                problems.append(f"PATH lacks {directory}")
        for name, value in dict(record.get("env", {})).items():  # type: ignore[call-overload]
            if env.get(name) != value:
                problems.append(f"{name}={env.get(name, '(unset)')}, the roles set {value}")
    return problems


def check_image_env(image: str, run: verify.Run) -> list[str]:
    """The image ENV against the env.d records, read in a container of the image."""
    listing = run("cat /opt/efa-image/env.d/*.json")
    described = [json.loads(chunk) for chunk in split_json(listing.stdout)]
    return env_mismatches(image_env(image), described)


def split_json(text: str) -> list[str]:
    """Concatenated JSON objects (cat of several files) into one string each."""
    decoder, chunks, index = json.JSONDecoder(), [], 0
    while index < len(text.rstrip()):
        while text[index].isspace():
            index += 1
        _, end = decoder.raw_decode(text, index)
        chunks.append(text[index:end])
        index = end
    return chunks


def owner_alive(owner: str) -> bool:
    """Owners are `pid:<n>` of an efa-image build on this machine; others are left alone."""
    if not owner.startswith("pid:") or not owner[4:].isdigit():
        return True
    try:
        os.kill(int(owner[4:]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_build_containers(listing: str) -> list[str]:
    """Build containers, from `NAME OWNER` lines, whose owning build no longer runs.

    Only containers named as Packer names build containers: a container run from a
    built image may carry an owner label too (older images kept the build's label).
    """
    return [
        name
        for name, _, owner in (line.partition(" ") for line in listing.splitlines())
        if name.startswith(BUILD_CONTAINER_PREFIX) and not owner_alive(owner)
    ]


def remove_stale_build_containers() -> list[str]:
    """Build containers of an interrupted build (killed efa-image or packer) are removed."""
    template = f'{{{{.Names}}}} {{{{.Label "{OWNER_LABEL}"}}}}'
    listing = run_command(
        ["docker", "ps", "-a", "--filter", f"label={OWNER_LABEL}", "--format", template]
    )
    stale = stale_build_containers(listing.output)
    if stale:
        run_command(["docker", "rm", "-f", *stale])
        print(f"removed build containers of interrupted builds: {', '.join(stale)}", flush=True)
    return stale
