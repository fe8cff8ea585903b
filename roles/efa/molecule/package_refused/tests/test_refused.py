"""The efa role's package method refused Debian 12's libfabric before any change."""

import pytest

LIST = "dpkg-query -W -f '${Package} ${Version} ${db:Status-Status}\\n'"
# Everything the package method (or any other) would install or write.
PACKAGES = ["libfabric1", "libfabric-bin", "ibverbs-providers", "ibverbs-utils", "libibverbs1"]
PATHS = [
    "/opt/efa-image",
    "/opt/amazon",
    "/etc/ld.so.conf.d/efa-image-efa.conf",
    "/etc/profile.d/efa-image-efa.sh",
    "/var/lib/efa-image",
    "/var/tmp/efa-image-build",
]


def test_the_base_is_debian_12(host):
    assert host.system_info.distribution == "debian"
    assert host.system_info.release.split(".")[0] == "12"


@pytest.mark.parametrize("name", PACKAGES)
def test_no_package_was_installed(host, name):
    assert not host.package(name).is_installed


@pytest.mark.parametrize("path", PATHS)
def test_nothing_was_written(host, path):
    assert not host.file(path).exists


def test_the_installed_packages_are_those_before_the_converge(host):
    """prepare.yml recorded them; the preflight's probe unpacks the candidate elsewhere."""
    before = host.file("/root/packages-before-converge.txt").content_string
    assert host.check_output(LIST) + "\n" == before
