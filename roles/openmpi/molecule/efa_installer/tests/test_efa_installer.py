"""The AWS EFA installer in container mode, and the Open MPI it installs."""

from efa_image.artifacts import context
from efa_image.verification import verify

INSTALLER = context.role_lock().get("efa_installer")


def test_installer_record_names_the_version(host):
    record = host.file("/opt/amazon/efa_installed_packages").content_string
    assert f"EFA installer version: {INSTALLER.version}" in record


def test_libfabric_verifies(host):
    report = verify.verify_efa(host.run, "/opt/amazon/efa")
    assert report.ok, report.render()


def test_installer_open_mpi_has_the_ofi_mtl(host):
    assert "MCA mtl: ofi" in host.check_output("/opt/amazon/openmpi/bin/ompi_info")


def test_no_kernel_module_in_container_mode(host):
    # --skip-kmod: the EFA driver belongs to the host, never to the image.
    assert not host.file("/usr/src").exists or not host.run("ls -d /usr/src/efa-*").stdout
