from pathlib import Path

from efa_image.verification import fi_info

SEED = Path(__file__).resolve().parents[1].parent / "shared/seeds/000_a65f4928320e2436.txt"

# The sample in AWS's "Run training with EFA" (shared/seeds/000_...), verbatim.
AWS_SAMPLE = """\
provider: efa
fabric: EFA-fe80::e5:56ff:fe34:56a8
domain: efa_0-rdm
version: 2.0
type: FI_EP_RDM
protocol: FI_PROTO_EFA
provider: efa
fabric: EFA-fe80::e5:56ff:fe34:56a8
domain: efa_0-dgrm
version: 2.0
type: FI_EP_DGRAM
protocol: FI_PROTO_EFA
provider: efa;ofi_rxd
fabric: EFA-fe80::e5:56ff:fe34:56a8
domain: efa_0-dgrm
version: 1.0
type: FI_EP_RDM
protocol: FI_PROTO_RXD
"""


def test_aws_sample_parses_into_three_endpoints():
    endpoints = fi_info.parse_endpoints(AWS_SAMPLE)
    assert [(e.provider, e.domain, e.type, e.protocol) for e in endpoints] == [
        ("efa", "efa_0-rdm", "FI_EP_RDM", "FI_PROTO_EFA"),
        ("efa", "efa_0-dgrm", "FI_EP_DGRAM", "FI_PROTO_EFA"),
        ("efa;ofi_rxd", "efa_0-dgrm", "FI_EP_RDM", "FI_PROTO_RXD"),
    ]
    assert endpoints[0].fabric == "EFA-fe80::e5:56ff:fe34:56a8"
    assert endpoints[0].version == "2.0"
    assert endpoints[2].providers == ["efa", "ofi_rxd"]


def test_sample_matches_the_seed_document():
    if SEED.exists():
        text = SEED.read_text()
        block = text[text.index("provider: efa") : text.index("protocol: FI_PROTO_RXD")]
        assert block + "protocol: FI_PROTO_RXD\n" == AWS_SAMPLE


def test_indented_real_output_and_extra_fields():
    text = (
        "provider: tcp\n    fabric: 172.17.0.0/16\n    domain: eth0\n    version: 200.0\n"
        "    type: FI_EP_MSG\n    protocol: FI_PROTO_SOCK_TCP\n"
        "provider: tcp\n    fabric: 172.17.0.0/16\n    domain: eth0\n    version: 200.0\n"
        "    type: FI_EP_RDM\n    protocol: FI_PROTO_XNET\n    caps: [ FI_MSG ]\n"
    )
    endpoints = fi_info.parse_endpoints(text)
    assert [e.type for e in endpoints] == ["FI_EP_MSG", "FI_EP_RDM"]
    assert endpoints[1].extra == {"caps": "[ FI_MSG ]"}


def test_provider_list_and_version():
    listing = "efa:\n    version: 201.0\ntcp:\n    version: 200.0\nofi_rxm:\n    version: 200.0\n"
    assert fi_info.parse_provider_list(listing) == {
        "efa": "201.0",
        "tcp": "200.0",
        "ofi_rxm": "200.0",
    }
    version = "/opt/amazon/efa/bin/fi_info: 2.1.0\nlibfabric: 2.1.0\nlibfabric api: 2.1\n"
    assert fi_info.parse_version(version) == {
        "fi_info": "2.1.0",
        "libfabric": "2.1.0",
        "libfabric api": "2.1",
    }


def test_getinfo_error():
    assert fi_info.getinfo_error("fi_getinfo: -61 (No data available)\n") == (
        -61,
        "No data available",
    )
    assert fi_info.getinfo_error(AWS_SAMPLE) is None
    assert fi_info.parse_endpoints("fi_getinfo: -61 (No data available)\n") == []


DATA = Path(__file__).parent / "data"


def test_real_output_of_the_built_role():
    """Captured from the efa role's container (libfabric 2.1.0, source method, no EFA)."""
    versions = fi_info.parse_version((DATA / "fi_info-version-2.1.0.txt").read_text())
    assert versions["fi_info"] == versions["libfabric"] == "2.1.0"
    providers = fi_info.parse_provider_list((DATA / "fi_info-l-2.1.0.txt").read_text())
    assert {"efa", "shm", "sm2", "tcp", "ofi_rxm"} <= set(providers)
    assert providers["efa"] == "201.0"
    tcp = fi_info.parse_endpoints((DATA / "fi_info-p-tcp-2.1.0.txt").read_text())
    assert tcp and all("tcp" in e.providers for e in tcp)
    assert {e.type for e in tcp} >= {"FI_EP_RDM", "FI_EP_MSG"}
    assert any(e.provider == "tcp;ofi_rxm" for e in tcp)
    assert {e.protocol for e in tcp if e.provider == "tcp" and e.type == "FI_EP_RDM"} == {
        "FI_PROTO_XNET"
    }
    no_device = (DATA / "fi_info-p-efa-nodevice-2.1.0.txt").read_text()
    assert fi_info.getinfo_error(no_device) == (-61, "No data available")
