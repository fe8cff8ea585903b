"""smdistributed-dataparallel from the mirror over PyTorch, NCCL, Open MPI and libfabric."""

import json
import re

import pytest

from efa_image.artifacts import context
from efa_image.compat import smdistributed

WHEEL = context.role_lock("portable").get("smdistributed_dataparallel")
PYTHON = "/opt/efa-image/venv/bin/python"
PACKAGE_QUERY = (
    "import importlib.metadata as m, os, sys, torch;"
    " d = m.distribution('smdistributed-dataparallel');"
    " print(json.dumps({'version': d.version, 'torch': torch.__version__,"
    " 'dir': os.path.join(str(d.locate_file('')), 'smdistributed', 'dataparallel')}))"
)


@pytest.fixture(scope="module")
def package(host):
    out = host.check_output(f'{PYTHON} -c "import json; {PACKAGE_QUERY}"')
    return json.loads(out)


def test_the_lock_build_is_installed_and_fits_the_pytorch(package):
    build = smdistributed.build_for(
        "dataparallel",
        smdistributed.Pin(WHEEL.name, WHEEL.version, WHEEL.filename, WHEEL.urls[0], WHEEL.sha256),
    )
    assert build is not None and package["version"] == WHEEL.version
    assert package["torch"].split("+")[0] in [f.pytorch for f in build.fits_with]


def test_it_imports_in_the_images_python(host):
    host.run_expect([0], f"{PYTHON} -c 'import smdistributed.dataparallel.torch'")


def test_its_lib_is_on_the_loader_path(host, package):
    conf = host.file("/etc/ld.so.conf.d/efa-image-smdistributed.conf").content_string
    assert conf.strip() == f"{package['dir']}/lib"
    libraries = host.check_output(
        f"find {package['dir']}/lib -name '*.so*' -type f -printf '%f\\n'"
    )
    cache = host.check_output("ldconfig -p")
    assert libraries.split() and all(name.split(".so")[0] in cache for name in libraries.split())


def test_ldd_resolves_every_library_and_symbol(host, package):
    objects = host.check_output(f"find {package['dir']} -name '*.so*' -type f").split()
    assert objects
    # What importing torch loads first: its lib/ and the nvidia-* wheels' lib/.
    search = host.check_output(
        f"{PYTHON} -c 'import glob, os, torch; top = os.path.dirname(torch.__file__);"
        ' print(":".join([top + "/lib"] + glob.glob(os.path.dirname(top) + "/nvidia/*/lib")))\''
    )
    for path in objects:
        out = host.run(f"LD_LIBRARY_PATH={search} ldd -r {path}")
        assert "not found" not in out.stdout + out.stderr, path
        undefined = re.findall(r"undefined symbol: (\S+)", out.stdout + out.stderr)
        assert [s for s in undefined if not s.startswith(("Py", "_Py"))] == [], path
        # The image's NCCL (the nccl role's), not a copy of its own.
        assert not re.search(rf"libnccl\S* => {re.escape(package['dir'])}", out.stdout), path


def test_component_record_names_the_pinned_build(host, package):
    record = json.loads(
        host.file("/opt/efa-image/components/smdistributed_dataparallel.json").content_string
    )
    assert record["version"] == WHEEL.version and record["sha256"] == WHEEL.sha256
    assert record["source"] == WHEEL.urls[0] and record["prefix"] == package["dir"]
    installed = json.loads(host.file(f"{package['dir']}/.efa-image-installed").content_string)
    assert installed["inputs"]["artifact"]["sha256"] == WHEEL.sha256
    # The wheel does not stay behind in the build tree.
    assert not host.file("/var/tmp/efa-image-build/smdistributed_dataparallel").exists


def test_the_image_env_sets_no_fi_provider(host):
    listing = host.check_output("cat /opt/efa-image/env.d/*.json")
    assert "FI_PROVIDER" not in listing
