"""The PyTorch an image holds: from a probe of its Python, or from the wheels its lock installs.

Two checks need the same facts before anything runs: the smdistributed rules
(efa_image.compat.smdistributed: AWS builds each wheel for one PyTorch, CUDA
and Python) and the compatibility rules on a planned build
(efa_image.compat.planned: PyTorch's NCCL against the image's). Both read them
here, so a torch wheel's name is parsed in one place.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from efa_image.artifacts.lock import Artifact

TORCH_WHEEL = re.compile(r"^torch-(?P<version>[0-9.]+)(?:\+cu(?P<cu>\d+))?-(?P<python>cp3\d+)-")
# nvidia_cuda_runtime_cu12-12.4.127 (CUDA 12 wheels); from CUDA 13 the names carry
# no suffix: nvidia_cuda_runtime-13.2.86.
CUDA_RUNTIME_WHEEL = re.compile(r"^nvidia_cuda_runtime(?:_cu\d+)?-(?P<major>\d+)\.(?P<minor>\d+)\.")
# NVIDIA's NCCL wheel, as PyTorch's wheels pin it.
NCCL_PROJECT = re.compile(r"^nvidia-nccl-cu\d+$")


def cuda_tag(cuda: str) -> str:
    """'12.4' -> 'cu124', as wheel and image names spell it."""
    return f"cu{cuda.replace('.', '')}"


@dataclass(frozen=True)
class Image:
    """What the image's Python holds: PyTorch ('' when none), its CUDA and the Python tag."""

    pytorch: str
    cuda: str
    python: str

    @classmethod
    def from_probe(cls, torch: str | None, cuda: str | None, python: str) -> Image:
        """torch '2.5.1+cu124' -> '2.5.1'; CUDA '12.4.1' -> '12.4'; Python '3.11' -> 'cp311'."""
        release = re.match(r"\d+(?:\.\d+)*", (torch or "").strip())
        cuda_parts = re.findall(r"\d+", cuda or "")[:2]
        tag = python.strip()
        if not tag.startswith("cp"):
            tag = "cp" + "".join(re.findall(r"\d+", tag)[:2])
        return cls(release.group() if release else "", ".".join(cuda_parts), tag)

    def describe(self) -> str:
        cuda = cuda_tag(self.cuda) if self.cuda else "no CUDA"
        return f"PyTorch {self.pytorch or '(none)'}/{cuda}/{self.python}"


def torch_wheel(artifacts: Sequence[Artifact]) -> Artifact | None:
    """The torch wheel among a build's artifacts, None where it installs no PyTorch."""
    return next((a for a in artifacts if TORCH_WHEEL.match(a.filename)), None)


def lock_image(artifacts: Sequence[Artifact]) -> Image | None:
    """The PyTorch a build's lock installs, from its wheels' file names; None without one.

    PyPI's torch wheels carry no +cuXYZ: the CUDA then comes from the
    nvidia-cuda-runtime wheel beside it ('' when neither says).
    """
    torch = torch_wheel(artifacts)
    tags = TORCH_WHEEL.match(torch.filename) if torch else None
    if tags is None:
        return None
    runtime = next(filter(None, (CUDA_RUNTIME_WHEEL.match(a.filename) for a in artifacts)), None)
    if tags.group("cu"):
        cu = tags.group("cu")
        cuda = f"{cu[:-1]}.{cu[-1]}"
    else:
        cuda = f"{runtime.group('major')}.{runtime.group('minor')}" if runtime else ""
    return Image(tags.group("version"), cuda, tags.group("python"))


def torch_facts(needed: Sequence[Artifact], image_nccl: str | None) -> dict[str, str]:
    """torch, torch_cuda, torch_nccl_built and torch_nccl from the lock's PyTorch wheel set.

    The NCCL torch was built with is the nvidia-nccl-cuXX its set pins (left
    out of the set, `excluded`, or installed); the one it loads is that wheel
    where the set installs it (torch's RPATH finds it before ld.so), else
    `image_nccl`, the nccl role's version. Empty where the build installs no
    torch wheel.
    """
    image = lock_image(needed)
    torch = torch_wheel(needed)
    if image is None or torch is None:
        return {}
    facts = {"torch": image.pytorch}
    if image.cuda:
        facts["torch_cuda"] = image.cuda
    excluded = {p: v for p, v in torch.wheelset_excluded if NCCL_PROJECT.match(p)}
    members = [a for a in needed if a.wheelset and a.wheelset == torch.wheelset]
    installed = [a for a in members if NCCL_PROJECT.match(a.name.rsplit("/", 1)[-1])]
    if installed:
        facts["torch_nccl_built"] = facts["torch_nccl"] = installed[0].version
    elif excluded:
        facts["torch_nccl_built"] = next(iter(excluded.values()))
        if image_nccl:
            facts["torch_nccl"] = image_nccl
    return facts
