import pytest

from efa_image.compat import rules
from efa_image.errors import EfaImageError

GOOD = {
    "efa_installer": "1.47.0",
    "libfabric": "2.1.0amzn3.0",
    "nccl": "2.30.4",
    "aws_ofi_nccl": "1.19.0",
    "nccl_cuda_major": "12",
    "base_cuda_major": "12",
    "torch_nccl": "2.30.1",
    "efa_method": "efa_installer",
}
RULES = rules.load_rules()
IDS = {rule.id for rule in RULES}


def run(**changes):
    facts = {**GOOD, **changes}
    return rules.check({k: v for k, v in facts.items() if v is not None}, RULES)


def violated(result):
    return [v.rule for v in result.violations]


def skipped(result):
    return {s.rule: s.why for s in result.skipped}


def test_packaged_rules_load_and_good_facts_pass():
    assert {
        "nccl-2.19-needs-efa-installer-1.29",
        "nccl-2.19-needs-libfabric-1.19.1",
        "aws-ofi-nccl-1.13-needs-libfabric-1.22",
        "nccl-cuda-major-matches-base",
        "torch-nccl-matches-image-nccl",
    } <= IDS
    result = rules.check(GOOD)  # the packaged rules by default
    assert result.ok
    assert result.violations == []
    assert set(result.passed) | set(skipped(result)) == IDS


def test_version_tuple():
    assert rules.version_tuple("2.30.4-1") == (2, 30, 4, 1)
    assert rules.version_tuple("1.22.0amzn4.0") == (1, 22, 0)
    assert rules.version_tuple("v1.13.2-aws") == (1, 13, 2)
    assert rules.version_tuple("2.21.5+cuda12.4") == (2, 21, 5)
    with pytest.raises(ValueError, match="not a version"):
        rules.version_tuple("unknown")


def test_nccl_2_19_needs_efa_installer_1_29():
    assert "nccl-2.19-needs-efa-installer-1.29" in run().passed
    result = run(efa_installer="1.28.0")
    assert violated(result) == ["nccl-2.19-needs-efa-installer-1.29"]
    message = result.violations[0].message
    assert message.startswith("nccl 2.30.4 needs efa_installer >= 1.29 (have 1.28.0): NCCL 2.19+")
    assert "Fix: use EFA installer 1.29 or newer" in message
    assert result.violations[0].reference.endswith("aws/aws-ofi-nccl/issues/584")
    assert run(efa_installer="1.28.0", nccl="2.18.6", torch_nccl="2.18.6").ok  # before 2.19
    why = skipped(run(efa_installer=None))["nccl-2.19-needs-efa-installer-1.29"]
    assert why == "no efa_installer fact"
    why = skipped(run(efa_installer="1.28.0", efa_method="source"))
    assert "efa_method is source" in why["nccl-2.19-needs-efa-installer-1.29"]


def test_nccl_2_19_needs_libfabric_with_source_method():
    rule = "nccl-2.19-needs-libfabric-1.19.1"
    assert rule in run(efa_method="source", libfabric="1.19.1").passed
    result = run(efa_method="source", libfabric="1.19.0", aws_ofi_nccl=None)
    assert violated(result) == [rule]
    assert "needs libfabric >= 1.19.1 (have 1.19.0)" in result.violations[0].message
    assert "efa_method is efa_installer" in skipped(run(libfabric="1.19.0"))[rule]
    assert "no efa_method fact" in skipped(run(efa_method=None))[rule]


@pytest.mark.parametrize(
    ("plugin", "libfabric", "rule"),
    [
        ("1.7.4-aws", "1.10.0", "aws-ofi-nccl-1.7-needs-libfabric-1.11"),
        ("1.9.1-aws", "1.17.1", "aws-ofi-nccl-1.8-needs-libfabric-1.18"),
        ("1.12.1-aws", "1.17.0", "aws-ofi-nccl-1.8-needs-libfabric-1.18"),
        ("1.13.0-aws", "1.21.0", "aws-ofi-nccl-1.13-needs-libfabric-1.22"),
        ("1.19.0", "1.18.2amzn1.0", "aws-ofi-nccl-1.13-needs-libfabric-1.22"),
    ],
)
def test_plugin_needs_libfabric(plugin, libfabric, rule):
    result = run(aws_ofi_nccl=plugin, libfabric=libfabric)
    assert violated(result) == [rule]
    assert f"aws_ofi_nccl {plugin} needs libfabric >=" in result.violations[0].message
    assert rule in run(aws_ofi_nccl=plugin, libfabric="1.22.0amzn4.0").passed


def test_plugin_rules_skip_without_facts_and_outside_their_range():
    plugin_rules = {rule for rule in IDS if rule.startswith("aws-ofi-nccl-")}
    assert all(skipped(run(aws_ofi_nccl=None))[r] == "no aws_ofi_nccl fact" for r in plugin_rules)
    why = skipped(run(libfabric=None))["aws-ofi-nccl-1.13-needs-libfabric-1.22"]
    assert why == "no libfabric fact"
    why = skipped(run())["aws-ofi-nccl-1.7-needs-libfabric-1.11"]
    assert why == "does not apply: aws_ofi_nccl is 1.19.0, rule needs >= 1.7, < 1.8"


def test_plugin_needs_nccl_2_17_1():
    result = run(nccl="2.16.5", torch_nccl="2.16.5")
    assert violated(result) == ["aws-ofi-nccl-1.10-needs-nccl-2.17.1"]


def test_nccl_cuda_major_must_match_base():
    rule = "nccl-cuda-major-matches-base"
    assert rule in run().passed
    result = run(nccl_cuda_major="13")
    assert violated(result) == [rule]
    message = result.violations[0].message
    assert message.startswith("nccl_cuda_major 13 must be == 12 (from base_cuda_major 12): ")
    assert "Fix: install the NCCL build for the base image's CUDA major" in message
    assert skipped(run(base_cuda_major=None))[rule] == "no base_cuda_major fact"
    assert skipped(run(nccl_cuda_major=None))[rule] == "no nccl_cuda_major fact"


def test_nccl_cuda_major_from_names():
    assert rules.nccl_cuda_major("nvidia-nccl-cu12") == "12"
    assert rules.nccl_cuda_major("nvidia-nccl-cu13==2.30.4") == "13"
    assert rules.nccl_cuda_major("2.21.5-1+cuda12.4") == "12"
    assert rules.nccl_cuda_major("2.21.5") is None


def test_torch_nccl_must_match_major_minor():
    rule = "torch-nccl-matches-image-nccl"
    assert rule in run(torch_nccl="2.30.1").passed  # patch may differ
    assert rule in run(torch_nccl=(2, 30, 4)).passed
    result = run(torch_nccl=(2, 21, 5))
    assert violated(result) == [rule]
    message = result.violations[0].message
    assert "torch_nccl 2.21.5 must be == 2.30 (from nccl 2.30.4)" in message
    assert "nvidia-nccl-cuXX" in message
    assert "LD_PRELOAD" in message
    assert result.violations[0].reference.endswith("pytorch/pytorch/issues/122571")
    assert skipped(run(torch_nccl=None))[rule] == "no torch_nccl fact"
    assert violated(run(torch_nccl=2708)) == [rule]  # 2.7.8


def test_torch_nccl_version_forms():
    assert rules.torch_nccl_version((2, 21, 5)) == "2.21.5"
    assert rules.torch_nccl_version([2, 19, 3]) == "2.19.3"
    assert rules.torch_nccl_version(2708) == "2.7.8"
    assert rules.torch_nccl_version(21903) == "2.19.3"
    assert rules.torch_nccl_version("21903") == "2.19.3"
    assert rules.torch_nccl_version("(2, 21, 5)") == "2.21.5"
    assert rules.torch_nccl_version("2.21.5") == "2.21.5"
    assert rules.nccl_version_from_code(2406) == "2.4.6"
    assert rules.nccl_version_from_code(22809) == "2.28.9"
    with pytest.raises(ValueError):
        rules.nccl_version_from_code(0)


def test_unparsable_fact_skips_with_reason():
    why = skipped(run(efa_installer="unknown"))["nccl-2.19-needs-efa-installer-1.29"]
    assert "efa_installer 'unknown'" in why


def write(tmp_path, text):
    path = tmp_path / "rules.yml"
    path.write_text(text)
    return path


RULE = """\
rules:
  - id: my-rule
    when: {nccl: ">= 2.19"}
    require: {libfabric: ">= 1.19.1"}
    reason: because
    fix: upgrade
    reference: https://example.invalid/1
"""


def test_custom_rules_file(tmp_path):
    loaded = rules.load_rules(write(tmp_path, RULE))
    assert loaded == [
        rules.Rule(
            id="my-rule",
            reason="because",
            fix="upgrade",
            reference="https://example.invalid/1",
            require={"libfabric": ">= 1.19.1"},
            when={"nccl": ">= 2.19"},
        )
    ]
    result = rules.check({"nccl": "2.20.3", "libfabric": "1.18.0"}, loaded)
    assert [v.message for v in result.violations] == [
        "nccl 2.20.3 needs libfabric >= 1.19.1 (have 1.18.0): because. Fix: upgrade"
    ]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (RULE.replace("    fix: upgrade\n", ""), r"rule 'my-rule': missing 'fix'"),
        (RULE.replace("  - id: my-rule\n    when", "  - when"), r"rule #1: missing 'id'"),
        (RULE.replace('">= 1.19.1"', '">= latest"'), r"'my-rule': bad constraint for libfabric"),
        (RULE.replace('{libfabric: ">= 1.19.1"}', "[libfabric]"), r"'my-rule'.*'require'"),
        (RULE.replace("when: {", "when: ["), r"rules.yml: not YAML"),
        (RULE + RULE.replace("rules:\n", ""), "unique"),
        ("rules: {}\n", "top-level 'rules:' list"),
        ("- just a list\n", "top-level 'rules:' list"),
    ],
)
def test_malformed_rules(tmp_path, text, match):
    with pytest.raises(rules.RuleError, match=match):
        rules.load_rules(write(tmp_path, text))
    assert issubclass(rules.RuleError, EfaImageError)


def test_nccls_cuda_13_wheel_is_refused_on_a_cuda_12_base_and_taken_on_a_cuda_13_one():
    from efa_image.compat import rules

    wheel = "nvidia_nccl_cu13-2.30.7-py3-none-manylinux_2_18_x86_64.whl"
    facts = {"nccl": "2.30.7", "nccl_cuda_major": rules.nccl_cuda_major(wheel)}
    on_12 = rules.check({**facts, "base_cuda_major": "12"})
    assert [v.rule for v in on_12.violations] == ["nccl-cuda-major-matches-base"]
    assert rules.check({**facts, "base_cuda_major": "13"}).ok
