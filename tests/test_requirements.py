"""requirements.yml pins the collections that the pinned `ansible` package installs."""

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def installed_collections() -> dict[str, str]:
    galaxy = Path(sys.executable).with_name("ansible-galaxy")
    proc = subprocess.run(
        [str(galaxy), "collection", "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    found: dict[str, str] = {}
    for collections in json.loads(proc.stdout).values():
        for name, info in collections.items():
            found.setdefault(name, info["version"])
    return found


def test_pinned_collections_are_installed_at_their_pins():
    pins = yaml.safe_load((ROOT / "requirements.yml").read_text())["collections"]
    installed = installed_collections()
    for pin in pins:
        assert installed.get(pin["name"]) == pin["version"], pin["name"]


def test_pyproject_pins_every_tool_exactly():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    requirements = project["dependencies"] + extras["test"] + extras["setup"]
    assert requirements
    assert all("==" in requirement for requirement in requirements)


def test_setup_installs_with_the_pinned_uv():
    from efa_image.setup import toolchain

    (pin,) = toolchain.setup_requirements(ROOT)
    assert pin.startswith("uv==")
