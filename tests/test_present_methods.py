"""The roles' present method refuses, before any change, where the component is absent.

Each role's install-present.yml runs on localhost (check mode) with its prefix
pointing at an empty directory: the play fails with the role's message naming
what is missing and the way out. What present does on a real base image is
tests/image/test_sagemaker_image.py's extend build.
"""

from pathlib import Path

import pytest
import yaml

from localplay import run_playbook

# role: (its prefix variable, its refusal).
CASES = {
    "efa": ("efa_prefix", "efa_method present refused before any change: the image lacks"),
    "openmpi": ("openmpi_prefix", "openmpi_method present refused before any change"),
    "nccl": ("nccl_prefix", "nccl_method present refused before any change"),
    "aws_ofi_nccl": (
        "aws_ofi_nccl_prefix",
        "aws_ofi_nccl_method present refused before any change",
    ),
}


@pytest.mark.parametrize("role", sorted(CASES))
def test_present_refuses_a_prefix_without_the_component(tmp_path: Path, role: str):
    variable, message = CASES[role]
    empty = tmp_path / "empty"
    empty.mkdir()
    play = [
        {
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}"},
            "tasks": [
                {
                    "name": f"The {role} role's present method",
                    "ansible.builtin.include_role": {
                        "name": role,
                        "tasks_from": "install-present",
                    },
                    "vars": {f"{role}_method": "present", variable: str(empty)},
                }
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    proc = run_playbook(tmp_path / "play.yml", "--check")
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert message in output, output[-3000:]
    assert str(empty) in output
    assert not list(empty.iterdir())
