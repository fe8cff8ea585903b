"""The Packer template accepts exactly the flavours and profiles the catalog defines."""

import re

from efa_image.building import flavors


def allowed(root, variable):
    text = (root / "packer/variables.pkr.hcl").read_text()
    block = text[text.index(f'variable "{variable}"') :]
    return re.search(r"contains\(\[([^\]]*)\]", block).group(1).replace('"', "").split(", ")


def test_flavours_match_the_catalog_and_have_playbooks(root):
    catalog = flavors.load_catalog(root / "playbooks/group_vars/all/flavors.yml")
    # A flavour without a playbook would be planned, not offered.
    buildable = {name for name in catalog.flavors if (root / f"playbooks/{name}.yml").exists()}
    assert (
        set(allowed(root, "flavor"))
        == buildable
        == {
            "efa",
            "efa-reduced",
            "sagemaker",
            "sagemaker-reduced",
            "sagemaker-torchrun",
            "sagemaker-torchrun-reduced",
        }
    )
    assert set(catalog.buildable()) == buildable


def test_profiles_match_the_catalog(root):
    catalog = flavors.load_catalog(root / "playbooks/group_vars/all/flavors.yml")
    assert sorted(allowed(root, "profile")) == sorted(catalog.profiles)
