"""PyTorch's NCCL against the image's, decided from the lock when `efa-image build` plans.

The torch side comes from the lock's pytorch wheel set: the nvidia-nccl-cu12 it
leaves out (`excluded`, with the version torch pins: the NCCL it was built with)
and the torch and CUDA runtime wheels' names. The refusals use overlays written
into a temporary directory; the passing case is the project's own lock.
"""

from dataclasses import replace

import pytest

from efa_image.artifacts import context, lock, preflight
from efa_image.artifacts.artifact_store import Store
from efa_image.building import build, images
from efa_image.compat import planned, rules
from efa_image.errors import EfaImageError
from efa_image.types import BuildRequest

RULES = ("torch-nccl-matches-image-nccl", "image-nccl-not-older-than-torch-build")
FLAVOR, PROFILE = "sagemaker-reduced", "portable"


class Stop(Exception):
    """Raised where the build would go on to check the artifacts' sources."""


def load(tmp_path, overlay: str | None = None) -> context.Context:
    overlays = []
    if overlay is not None:
        path = tmp_path / "overlay.yml"
        path.write_text("---\nefa_image_artifacts_overlay:\n" + overlay)
        overlays.append(path)
    return context.load(None, overlays, PROFILE, Store(tmp_path / "cache"))


def facts_of(ctx: context.Context) -> dict[str, str]:
    needed = ctx.select(None, FLAVOR, PROFILE).artifacts
    methods = ctx.catalog.methods(PROFILE)
    return planned.compat_facts(needed, ctx.catalog.roles(FLAVOR), methods, images.BaseCuda())


def test_the_locks_pytorch_set_names_the_nccl_torch_was_built_with(root):
    loaded = lock.load(root / "playbooks/group_vars/all/versions.yml")
    torch = loaded.get("pytorch/torch")
    assert dict(torch.wheelset_excluded) == {"nvidia-nccl-cu12": "2.21.5"}
    assert "pytorch/nvidia-nccl-cu12" not in loaded.artifacts


def test_the_real_lock_passes_both_rules(tmp_path):
    facts = facts_of(load(tmp_path))
    assert facts["torch"] == "2.5.1" and facts["torch_cuda"] == "12.4"
    assert facts["torch_nccl_built"] == "2.21.5"
    # The set leaves NVIDIA's NCCL wheel out: torch loads the image's.
    assert facts["torch_nccl"] == facts["nccl"] == "2.30.7"
    result = rules.check(facts)
    assert set(RULES) <= set(result.passed), result.skipped


def test_the_torchrun_flavour_has_cuda_13_torch_on_the_cuda_13_nccl(tmp_path):
    ctx = load(tmp_path)
    flavor = "sagemaker-torchrun-reduced"
    needed = ctx.select(None, flavor, PROFILE).artifacts
    facts = planned.compat_facts(
        needed, ctx.catalog.roles(flavor), ctx.catalog.methods(PROFILE), images.BaseCuda()
    )
    assert facts["torch"] == "2.15.0" and facts["torch_cuda"] == "13.2"
    assert facts["torch_nccl_built"] == facts["torch_nccl"] == facts["nccl"] == "2.30.7"
    assert facts["nccl_cuda_major"] == "13"
    result = rules.check(facts)
    assert {*RULES, "image-nccl-cuda-major-matches-torch"} <= set(result.passed), result.skipped


def test_a_cuda_12_nccl_under_a_cuda_13_torch_is_refused():
    facts = {"torch": "2.15.0", "torch_cuda": "13.2", "nccl": "2.30.7", "nccl_cuda_major": "12"}
    violations = {v.rule for v in rules.check(facts).violations}
    assert violations == {"image-nccl-cuda-major-matches-torch"}


def test_without_pytorch_in_the_flavor_the_rules_are_skipped(tmp_path):
    ctx = load(tmp_path)
    needed = ctx.select(None, "efa-reduced", PROFILE).artifacts
    facts = planned.compat_facts(
        needed, ctx.catalog.roles("efa-reduced"), ctx.catalog.methods(PROFILE), images.BaseCuda()
    )
    skipped = {s.rule: s.why for s in rules.check(facts).skipped}
    assert skipped["image-nccl-not-older-than-torch-build"] == "no torch_nccl_built fact"
    assert skipped["torch-nccl-matches-image-nccl"] == "no torch_nccl fact"


@pytest.fixture
def stubbed(monkeypatch, base_probed):
    """build.build() with the artifact pre-flight and the base image stubbed out."""
    calls: list[str] = []

    def reached(*_args, **_kwargs):
        calls.append("preflight")
        raise Stop

    monkeypatch.setattr(preflight, "check_sources", reached)
    return calls, base_probed


def request_for(ctx: context.Context) -> BuildRequest:
    return BuildRequest(
        flavor=FLAVOR,
        profile=PROFILE,
        base_image="efa-image/base:debian12",
        repository="t",
        mirror=None,
        overlays=tuple(str(p) for p in ctx.overlays),
    )


def test_build_goes_past_the_lock_check_with_the_real_lock(tmp_path, stubbed):
    ctx = load(tmp_path)
    with pytest.raises(Stop):
        build.build(request_for(ctx), ctx)
    assert stubbed == (["preflight"], ["efa-image/base:debian12"])


def test_an_image_nccl_older_than_torchs_build_is_refused_before_the_pre_flight(
    tmp_path, stubbed, capsys
):
    ctx = load(tmp_path, '  nccl_wheel:\n    version: "2.20.5"\n')
    with pytest.raises(EfaImageError) as error:
        build.build(request_for(ctx), ctx)
    message = str(error.value)
    assert message.startswith("incompatible versions, nothing was built:")
    assert "nccl 2.20.5 must be >= 2.21.5 (from torch_nccl_built 2.21.5)" in message
    assert "Fix: give the image an NCCL at least as new as PyTorch's build" in message
    # Judged once, in the plan: the artifacts' sources were not asked.
    assert stubbed == ([], ["efa-image/base:debian12"])
    assert "BAD  image-nccl-not-older-than-torch-build" in capsys.readouterr().out


def test_a_set_that_installs_its_own_nccl_wheel_is_refused_naming_the_exclude(tmp_path):
    ctx = load(tmp_path)
    needed = ctx.select(None, FLAVOR, PROFILE).artifacts
    torch = ctx.lock.get("pytorch/torch")
    # The set as a resolution without resolve.exclude would have it.
    nccl = replace(
        torch,
        name="pytorch/nvidia-nccl-cu12",
        version="2.21.5",
        filename="nvidia_nccl_cu12-2.21.5-py3-none-manylinux2014_x86_64.whl",
        wheelset_excluded=(),
    )
    with_wheel = [replace(a, wheelset_excluded=()) if a.wheelset else a for a in needed]
    roles, methods = ctx.catalog.roles(FLAVOR), ctx.catalog.methods(PROFILE)
    facts = planned.compat_facts([*with_wheel, nccl], roles, methods, images.BaseCuda())
    with pytest.raises(EfaImageError) as error:
        planned.check_compatibility(facts)
    message = str(error.value)
    assert "torch_nccl 2.21.5 must be == 2.30 (from nccl 2.30.7)" in message
    assert "resolve.exclude" in message and "efa-image lock update pytorch" in message


@pytest.mark.parametrize("excluded", ["nvidia-nccl-cu12", ["2.21.5"], {"nvidia-nccl-cu12": ""}])
def test_a_malformed_excluded_field_names_the_entry(tmp_path, excluded):
    entry = {
        "kind": "wheelset",
        "version": "2.5.1",
        "role": "pytorch",
        "wheels": [
            {
                "filename": "torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl",
                "urls": ["https://example.invalid/torch.whl"],
                "sha256": "a" * 64,
            }
        ],
        "excluded": excluded,
    }
    with pytest.raises(lock.LockError, match=r"versions\.yml: efa_image_artifacts\.pytorch\.excl"):
        lock.parse_entries({"pytorch": entry}, [], "versions.yml")
