"""The `efa-image` parser: assembled from one module per verb group, importable
where `make setup` runs it (the system Python, before the virtualenv exists)."""

import subprocess
import sys

from efa_image import cli

# Imports efa_image.cli and parses `setup`, then names every module loaded that is
# neither the standard library's nor efa_image's. Run with -S: no site-packages,
# so a third-party import fails outright.
LOADED_BY_SETUP = """
import sys
sys.path.insert(0, "src")
from efa_image.cli import build_parser
assert build_parser().parse_args(["setup"]).func.__name__ == "cmd_setup"
top = {name.partition(".")[0] for name in sys.modules}
print(" ".join(sorted(top - set(sys.stdlib_module_names) - {"efa_image", "__main__"})))
"""


def test_the_setup_path_imports_no_third_party_package(root):
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", LOADED_BY_SETUP],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.split() == []


def test_every_verb_has_its_command():
    parser = cli.build_parser()
    verbs = {
        "setup": [],
        "base": [],
        "build": [],
        "push": ["image", "repo/name"],
        "verify": [],
        "fetch": [],
        "mirror": ["create", "dir"],
        "lock": ["list"],
        "distribution": ["--instance-type", "ml.p4d.24xlarge", "--library", "mpi"],
    }
    for verb, rest in verbs.items():
        assert callable(parser.parse_args([verb, *rest]).func), verb
    assert (
        parser.parse_args(["lock", "update", "nccl"]).func.__module__ == "efa_image.cli.artifacts"
    )


def test_python_m_efa_image_runs_the_cli(root):
    proc = subprocess.run(
        [sys.executable, "-m", "efa_image", "--version"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.startswith("efa-image ")
