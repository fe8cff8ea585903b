"""The rmm wheel's CUDA major against the base image's: a rule checked before a build."""

import pytest

from efa_image.artifacts import lock
from efa_image.artifacts.lock import Artifact
from efa_image.building import images
from efa_image.compat import planned, rules
from efa_image.errors import EfaImageError

RULE = "rmm-cuda-major-matches-base"
WHEEL_12 = "librmm_cu12-26.10.0-py3-none-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl"
WHEEL_13 = "librmm_cu13-26.10.0-py3-none-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl"


def wheel(filename: str) -> Artifact:
    return Artifact(
        name="rmm_wheel",
        version="26.10.0",
        role="rmm",
        filename=filename,
        urls=("u",),
        sha256="0" * 64,
        kind="wheel",
    )


def test_cuda_major_from_the_wheel_name():
    assert rules.rmm_cuda_major(WHEEL_12) == "12"
    assert rules.rmm_cuda_major(WHEEL_13) == "13"
    assert rules.rmm_cuda_major("librmm-cu11==24.2.0") == "11"
    assert rules.rmm_cuda_major("nvidia_nccl_cu12-2.30.4-py3-none-any.whl") is None
    assert rules.rmm_cuda_major("rmm-26.10.00.tar.gz") is None


def test_the_locks_wheel_names_its_cuda_major(root):
    loaded = lock.load(root / "playbooks/group_vars/all/versions.yml")
    assert rules.rmm_cuda_major(loaded.get("rmm_wheel").filename) == "12"


def test_rule_is_packaged():
    assert RULE in {rule.id for rule in rules.load_rules()}


def test_matching_major_passes_and_another_is_a_violation_naming_the_fix():
    assert RULE in rules.check({"rmm_cuda_major": "12", "base_cuda_major": "12"}).passed
    result = rules.check({"rmm_cuda_major": "12", "base_cuda_major": "13"})
    [violation] = [v for v in result.violations if v.rule == RULE]
    head = "rmm_cuda_major 12 must be == 13 (from base_cuda_major 13): "
    assert violation.message.startswith(head)
    assert "rmm_wheel_artifact" in violation.message and "librmm-cu" in violation.message


def test_rule_is_skipped_without_cuda_in_the_base_or_without_the_wheel():
    skipped = {s.rule: s.why for s in rules.check({"rmm_cuda_major": "12"}).skipped}
    assert skipped[RULE] == "no base_cuda_major fact"
    skipped = {s.rule: s.why for s in rules.check({"base_cuda_major": "12"}).skipped}
    assert skipped[RULE] == "no rmm_cuda_major fact"


@pytest.mark.parametrize(
    ("roles", "needed", "expected"),
    [
        (["nccl", "rmm"], [wheel(WHEEL_13)], "13"),
        (["nccl"], [wheel(WHEEL_13)], None),  # rmm is not in the flavour
        (["rmm"], [], None),  # the source method needs no wheel
    ],
)
def test_facts_name_the_wheels_major_where_the_flavor_installs_it(roles, needed, expected):
    facts = planned.compat_facts(needed, roles, {}, images.BaseCuda("/usr/local/cuda", "12.4"))
    assert facts.get("rmm_cuda_major") == expected
    assert facts["base_cuda_major"] == "12"


def test_a_wheel_for_another_major_stops_the_build():
    facts = planned.compat_facts(
        [wheel(WHEEL_13)], ["rmm"], {}, images.BaseCuda("/usr/local/cuda", "12.4")
    )
    with pytest.raises(EfaImageError, match="nothing was built") as info:
        planned.check_compatibility(facts)
    assert "rmm_cuda_major 13 must be == 12" in str(info.value)
    assert "https://docs.rapids.ai/install/#pip" in str(info.value)
