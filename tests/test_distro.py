"""The distro profile: the base image's libfabric package as a compatibility fact.

The probe's output is the one roles/common/files/package-probe.sh printed with
the efa role's arguments in Debian 13 and Debian 12 base images here; the rules
then judge that version and the EFA provider before any build work.
"""

import json

import pytest

from efa_image.artifacts import context
from efa_image.artifacts.lock import Artifact
from efa_image.building import distro, images, nearest
from efa_image.building.flavors import load_catalog
from efa_image.compat import planned, rules
from efa_image.errors import EfaImageError
from efa_image.verification import verify

TRIXIE = "updated yes\nsource candidate\nversion 2.1.0-1.1\nefa yes\n"
# Debian 12's libfabric links libefa, but 1.17 lists no efa provider without a
# device and predates the EFA fix NCCL 2.19+ needs.
BOOKWORM = "updated yes\nsource candidate\nversion 1.17.0-3\nefa yes\n"
NO_EFA = "source candidate\nversion 1:1.20.0-2\nefa no\n"
NCCL_WHEEL = Artifact(
    name="nccl_wheel",
    version="2.30.4",
    role="nccl",
    filename="nvidia_nccl_cu12-2.30.4-py3-none-manylinux_2_18_x86_64.whl",
    urls=("https://example.invalid/x.whl",),
    sha256="0" * 64,
)
PLUGIN = Artifact(
    name="aws_ofi_nccl",
    version="1.19.0",
    role="aws_ofi_nccl",
    filename="aws-ofi-nccl-1.19.0.tar.gz",
    urls=("https://example.invalid/p.tar.gz",),
    sha256="0" * 64,
)
DISTRO = load_catalog().methods("distro")
REDUCED = load_catalog().roles("efa-reduced")


def facts_for(probe: str, needed=(NCCL_WHEEL,), roles=REDUCED) -> dict[str, str]:
    found = distro.parse_probe(probe)
    return planned.compat_facts(list(needed), roles, DISTRO, images.BaseCuda(), found)


def test_the_probe_output_gives_the_upstream_version_and_the_efa_provider():
    found = distro.parse_probe(TRIXIE)
    assert (found.package_version, found.version, found.efa, found.source) == (
        "2.1.0-1.1",
        "2.1.0",
        True,
        "candidate",
    )
    assert distro.parse_probe(NO_EFA).version == "1.20.0"  # the epoch goes
    assert distro.parse_probe("updated yes\nsource none\n").version == ""


def test_the_distro_profile_installs_the_distributions_libfabric_and_open_mpi():
    assert DISTRO["efa"] == "package" and DISTRO["openmpi"] == "package"
    assert DISTRO["nccl"] == "wheel"
    # Nothing to download but NCCL's wheel for efa-reduced.
    catalog = load_catalog()
    lock = context.role_lock("distro")
    assert [a.name for a in catalog.needed(lock, "efa-reduced", "distro")] == ["nccl_wheel"]


def test_debian_13_libfabric_passes_with_nccl_from_the_wheel():
    facts = facts_for(TRIXIE)
    assert facts["libfabric"] == "2.1.0" and facts["libfabric_efa"] == "yes"
    result = rules.check(facts)
    assert result.ok, [v.message for v in result.violations]
    assert {"nccl-2.19-needs-distro-libfabric-1.19.1", "distro-libfabric-has-efa"} <= set(
        result.passed
    )


def test_debian_12_libfabric_1_17_is_refused_with_a_clear_message(capsys):
    facts = facts_for(BOOKWORM)
    with pytest.raises(EfaImageError) as error:
        planned.check_compatibility(facts)
    message = str(error.value)
    assert message.startswith("incompatible versions, nothing was built:")
    assert "nccl 2.30.4 needs libfabric >= 1.19.1 (have 1.17.0)" in message
    assert "the distribution's libfabric is such a one" in message
    assert "Fix: use a distribution with libfabric 1.19.1 or newer (Debian 13: 2.1.0)" in message
    assert "BAD  nccl-2.19-needs-distro-libfabric-1.19.1" in capsys.readouterr().out


def test_a_libfabric_package_without_the_efa_provider_is_refused():
    result = rules.check(facts_for(NO_EFA))
    assert [v.rule for v in result.violations] == ["distro-libfabric-has-efa"]
    assert "efa_method package needs libfabric_efa yes (have no)" in result.violations[0].message
    assert "built without the EFA provider" in result.violations[0].message


def test_without_the_probe_the_package_rules_are_skipped_not_passed():
    facts = planned.compat_facts([NCCL_WHEEL], REDUCED, DISTRO, images.BaseCuda())
    skipped = {s.rule: s.why for s in rules.check(facts).skipped}
    assert skipped["nccl-2.19-needs-distro-libfabric-1.19.1"] == "no libfabric fact"
    assert skipped["distro-libfabric-has-efa"] == "no libfabric_efa fact"


def test_the_plugin_cannot_build_against_libfabric_in_usr():
    roles = load_catalog().roles("efa")
    result = rules.check(facts_for(TRIXIE, (NCCL_WHEEL, PLUGIN), roles))
    assert [v.rule for v in result.violations] == ["aws-ofi-nccl-needs-libfabric-outside-usr"]
    assert "-isystem /usr/include" in result.violations[0].message
    # The source profiles keep libfabric in /opt/amazon/efa: the rule does not apply there.
    portable = planned.compat_facts(
        [NCCL_WHEEL, PLUGIN], roles, load_catalog().methods("portable"), images.BaseCuda()
    )
    skipped = {s.rule: s.why for s in rules.check(portable).skipped}
    assert skipped["aws-ofi-nccl-needs-libfabric-outside-usr"] == "no libfabric_in_usr fact"


def test_nearest_knows_the_distro_profile_and_why_efa_cannot_use_it():
    catalog = load_catalog()
    combos = nearest.combinations(catalog, "efa", "aws")
    assert ("efa", "distro") in combos and ("efa-reduced", "distro") in combos
    # What the pre-flight's remedy prints for a profile change to distro.
    found = nearest.Candidate("efa-reduced", "distro", needed=(NCCL_WHEEL,))
    lines = nearest.differences(catalog, "efa", "portable", found)
    assert "efa and openmpi by package instead of source" in " ".join(lines)


def test_image_facts_of_a_distro_image_feed_the_libfabric_rules():
    components = [
        {"name": "efa", "method": "package", "version": "1.17.0", "prefix": "/usr"},
        {"name": "nccl", "method": "wheel", "version": "2.30.4"},
    ]
    manifest = json.dumps({"components": components})

    def run(command):
        if command == "cat /opt/efa-image/manifest.json":
            return verify.Outcome(0, manifest, "")
        return verify.Outcome(1, "", "")

    facts = verify.image_facts(run)
    assert facts == {
        "efa_method": "package",
        "libfabric": "1.17.0",
        "libfabric_in_usr": "yes",
        "nccl": "2.30.4",
    }
    violations = [v.rule for v in rules.check(facts).violations]
    assert violations == ["nccl-2.19-needs-distro-libfabric-1.19.1"]


def test_verification_finds_libfabric_where_the_image_records_it():
    """/usr/bin/fi_info and the multiarch libfabric.so.1 of the distribution's packages."""
    library = "/lib/x86_64-linux-gnu/libfabric.so.1"
    responses = {
        "cat /opt/efa-image/components/efa.json": json.dumps({"prefix": "/usr"}),
        "ls -1 /dev/infiniband": "",
        "/usr/bin/fi_info --version": "fi_info: 2.1.0\nlibfabric: 2.1.0\nlibfabric api: 2.1\n",
        "/usr/bin/fi_info -l": "efa:\n    version: 201.0\ntcp:\n    version: 201.0\n",
        "ldd /usr/bin/fi_info": f"\tlibfabric.so.1 => {library} (0x1)\n",
        f"ldd {library}": "\tlibefa.so.1 => /lib/x86_64-linux-gnu/libefa.so.1 (0x1)\n",
        "/usr/bin/fi_info -p tcp": "provider: tcp\n    type: FI_EP_RDM\n",
    }

    def run(command):
        if command in responses:
            return verify.Outcome(0, responses[command], "")
        if command.endswith("-p efa -t FI_EP_RDM"):
            return verify.Outcome(1, "", "fi_getinfo: -61 (No data available)\n")
        return verify.Outcome(1, "", f"unexpected {command}")

    report = verify.verify_efa(run, version="2.1.0")
    assert report.ok, report.render()
    assert "libefa.so.1 linked" in report.render()


def test_the_probe_runs_the_roles_script_in_the_base_image(monkeypatch):
    seen = []

    class Result:
        output = TRIXIE

    monkeypatch.setattr(distro, "run_command", lambda argv: seen.append(argv) or Result())
    found = distro.probe_for("efa-image/base:debian13", DISTRO)
    assert found == distro.DistroLibfabric("2.1.0-1.1", True, "candidate")
    docker = ["docker", "run", "--rm", "--entrypoint", "/bin/sh", "efa-image/base:debian13"]
    assert seen[0][:6] == docker
    assert seen[0][7] == distro.PROBE.read_text()
    # The efa role's own arguments (vars/Debian.yml and vars/main.yml).
    assert seen[0][9:] == [
        "libfabric1",
        "/libfabric\\.so\\.1",
        "efa=has:libefa.so.1,efadv_query_device",
    ]
    assert distro.probe_for("x", load_catalog().methods("portable")) is None
