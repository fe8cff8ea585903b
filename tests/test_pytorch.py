"""The PyTorch an image holds: from a probe of its Python, from the wheels its lock installs."""

import pytest

from efa_image.artifacts import lock
from efa_image.compat import pytorch
from efa_image.compat.pytorch import Image


def wheel(name, filename, wheelset="", excluded=()):
    version = filename.split("-")[1]
    return lock.Artifact(
        name,
        version,
        "pytorch",
        filename,
        ("https://files.pythonhosted.org/x",),
        "ab" * 32,
        wheelset=wheelset,
        wheelset_excluded=excluded,
    )


CUDA_RUNTIME = wheel(
    "pytorch/nvidia-cuda-runtime-cu12",
    "nvidia_cuda_runtime_cu12-12.4.127-py3-none-manylinux2014_x86_64.whl",
)
TORCH = "torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl"


@pytest.mark.parametrize(
    ("probe", "expected"),
    [
        (("2.5.1+cu124", "12.4", "3.11"), Image("2.5.1", "12.4", "cp311")),
        (("2.0.1", "11.8.0", "cp310"), Image("2.0.1", "11.8", "cp310")),
        # AWS's own builds carry a suffix (Deep Learning Containers).
        (("1.10.2a0+git71f889c", "11.3", "3.8"), Image("1.10.2", "11.3", "cp38")),
        ((None, None, "3.11"), Image("", "", "cp311")),
    ],
)
def test_image_facts_are_normalised(probe, expected):
    assert Image.from_probe(*probe) == expected


def test_an_image_describes_itself_as_wheel_names_spell_cuda():
    assert Image("2.5.1", "12.4", "cp311").describe() == "PyTorch 2.5.1/cu124/cp311"
    assert Image("", "", "cp38").describe() == "PyTorch (none)/no CUDA/cp38"


@pytest.mark.parametrize(
    ("wheels", "expected"),
    [
        # PyPI's torch names no CUDA: the runtime wheel beside it does.
        ([wheel("pytorch/torch", TORCH), CUDA_RUNTIME], Image("2.5.1", "12.4", "cp311")),
        (
            [wheel("torch", "torch-2.4.0+cu121-cp311-cp311-linux_x86_64.whl")],
            Image("2.4.0", "12.1", "cp311"),
        ),
        ([wheel("pytorch/torch", TORCH)], Image("2.5.1", "", "cp311")),
        ([CUDA_RUNTIME], None),
    ],
)
def test_the_pytorch_a_lock_installs(wheels, expected):
    assert pytorch.lock_image(wheels) == expected


def test_torch_facts_follow_the_nccl_wheel_the_set_pins():
    """Left out of the set: built with the pinned NCCL, loads the image's; installed: both its."""
    excluded = wheel(
        "pytorch/torch", TORCH, wheelset="pytorch", excluded=(("nvidia-nccl-cu12", "2.21.5"),)
    )
    facts = pytorch.torch_facts([excluded, CUDA_RUNTIME], "2.30.4")
    assert facts == {
        "torch": "2.5.1",
        "torch_cuda": "12.4",
        "torch_nccl_built": "2.21.5",
        "torch_nccl": "2.30.4",
    }
    nccl = wheel(
        "pytorch/nvidia-nccl-cu12",
        "nvidia_nccl_cu12-2.21.5-py3-none-manylinux2014_x86_64.whl",
        wheelset="pytorch",
    )
    torch = wheel("pytorch/torch", TORCH, wheelset="pytorch")
    facts = pytorch.torch_facts([torch, nccl], "2.30.4")
    assert facts["torch_nccl_built"] == facts["torch_nccl"] == "2.21.5"
    assert pytorch.torch_facts([CUDA_RUNTIME], "2.30.4") == {}
