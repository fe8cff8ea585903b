"""The rmm role's preflight refuses bad input before any change, naming the fix.

Runs the role's preflight task file (nothing else of the role) against
localhost with ansible-playbook, one case per block, each with its own lock
and CUDA. The image's CUDA is a directory whose bin/nvcc prints a version, as
nvcc --version does: a fixture for the preflight's probe, not a compiler.
"""

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from localplay import lock_file, run_playbook

ROOT = Path(__file__).resolve().parents[1]
LOCK = yaml.safe_load((ROOT / "playbooks/group_vars/all/versions.yml").read_text())
WHEEL = LOCK["efa_image_artifacts"]["rmm_wheel"]
CUDA_TASK = "Assert the wheel is a librmm-cuXX wheel for the image's CUDA major"

CASES = {
    "wheel_cuda12": {"method": "wheel", "cuda": "12.4", "wheel": "rmm_wheel"},
    "wheel_no_cuda": {"method": "wheel", "cuda": "", "wheel": "rmm_wheel"},
    "wheel_cuda13": {"method": "wheel", "cuda": "13.0", "wheel": "rmm_wheel"},
    "wheel_unpinned": {"method": "wheel", "cuda": "12.4", "wheel": "rmm_wheel_unpinned"},
    "wheel_unpinned_allowed": {
        "method": "wheel",
        "cuda": "12.4",
        "wheel": "rmm_wheel_unpinned",
        "allow": True,
    },
    "wheel_not_librmm": {"method": "wheel", "cuda": "12.4", "wheel": "nccl_wheel"},
    "unknown_method": {"method": "pip", "cuda": "12.4", "wheel": "rmm_wheel"},
    # The lock's source archives are unpinned (GitHub is unreachable here).
    "source_unpinned": {"method": "source", "cuda": "12.4", "wheel": "rmm_wheel"},
    "source_no_nvcc": {"method": "source", "cuda": "", "wheel": "rmm_wheel"},
}


def case_block(name: str) -> dict:
    case = "__cases." + name
    return {
        "name": f"Case {name}",
        "block": [
            {
                "name": f"Include the rmm role's preflight, {name}",
                "ansible.builtin.include_role": {"name": "rmm", "tasks_from": "preflight"},
                "vars": {
                    "rmm_method": "{{ " + case + ".method }}",
                    "rmm_wheel_artifact": "{{ " + case + ".wheel }}",
                    "rmm_cuda_home": "{{ __cuda_homes." + name + " }}",
                    "artifact_allow_unpinned": "{{ " + case + ".allow | default(false) }}",
                },
            },
            {
                "name": f"Record that the preflight passed, {name}",
                "ansible.builtin.set_fact": {
                    "__results": "{{ __results | combine({'" + name + "': {'passed': true,"
                    " 'cuda': __rmm_cuda, 'compile': __rmm_compile | bool,"
                    " 'version': __rmm_version_normal}}) }}"
                },
            },
        ],
        "rescue": [
            {
                "name": f"Record the refusal, {name}",
                "ansible.builtin.set_fact": {
                    "__results": "{{ __results | combine({'" + name + "': {"
                    "'task': ansible_failed_task.name,"
                    " 'msg': ansible_failed_result.msg | default('')}}) }}"
                },
            }
        ],
    }


@pytest.fixture(scope="module")
def preflight(tmp_path_factory):
    """Each case's failed task and message, or what the preflight found."""
    tmp = tmp_path_factory.mktemp("rmm-preflight")
    lock = json.loads(json.dumps(LOCK))
    artifacts = lock["efa_image_artifacts"]
    artifacts["rmm_wheel_unpinned"] = {**artifacts["rmm_wheel"], "sha256": ""}
    lock_file(tmp).write_text(yaml.safe_dump(lock))
    homes = {}
    for name, case in CASES.items():
        home = tmp / "cuda" / name
        (home / "bin").mkdir(parents=True)
        if case["cuda"]:
            nvcc = home / "bin" / "nvcc"
            nvcc.write_text(
                "#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
                f"echo 'Cuda compilation tools, release {case['cuda']}, V{case['cuda']}.0'\n"
            )
            nvcc.chmod(0o755)
        homes[name] = str(home)
    tasks = [case_block(name) for name in CASES] + [
        {
            "name": "Write the results",
            "ansible.builtin.copy": {
                "dest": str(tmp / "results.json"),
                "content": "{{ __results | to_json }}",
                "mode": "0644",
            },
            # The test's own file, not the role's doing: the recap counts only the role.
            "changed_when": False,
        }
    ]
    playbook = [
        {
            "name": "Preflight of the rmm role",
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": True,
            "vars": {
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                "__results": {},
                "__cases": CASES,
                "__cuda_homes": homes,
            },
            "tasks": tasks,
        }
    ]
    (tmp / "play.yml").write_text(yaml.safe_dump(playbook, sort_keys=False))
    proc = run_playbook(tmp / "play.yml", env={"EFA_IMAGE_MIRROR": ""}, timeout=600, cwd=tmp)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    # The preflight changes nothing, whatever it decides.
    assert "changed=0" in proc.stdout.split("PLAY RECAP")[-1]
    return json.loads((tmp / "results.json").read_text())


def flat(text: str) -> str:
    return " ".join(text.split())


def test_matching_cuda_passes_and_plans_the_compile_check(preflight):
    result = preflight["wheel_cuda12"]
    assert result.get("passed"), result
    assert result["cuda"]["major"] == "12" and result["cuda"]["version"] == "12.4"
    assert result["compile"] is True
    assert result["version"] == WHEEL["version"]


def test_without_nvcc_the_linker_caches_cuda_runtime_decides(preflight):
    """No nvcc: the libcudart.so.<major> that ld.so knows is the image's CUDA, if any."""
    result = preflight["wheel_no_cuda"]
    cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    runtime = re.search(r"libcudart\.so\.(\d+) ", cache)
    if runtime is None or runtime.group(1) == "12":
        assert result.get("passed"), result
        assert result["cuda"]["nvcc"] == "" and result["compile"] is False
        assert result["cuda"]["major"] == (runtime.group(1) if runtime else "")
    else:
        assert result["task"] == CUDA_TASK
        assert f"the image has libcudart.so.{runtime.group(1)}" in flat(result["msg"])


def test_wheel_for_another_cuda_major_is_refused_naming_the_fix(preflight):
    result = preflight["wheel_cuda13"]
    assert result["task"] == CUDA_TASK
    msg = flat(result["msg"])
    assert "rmm_method wheel refused before any change" in msg
    assert "a wheel for CUDA 12" in msg and "(CUDA 13)" in msg
    assert "point rmm_wheel_artifact at a lock entry of librmm-cu13" in msg
    assert "efa-image lock update NAME" in msg


def test_unpinned_wheel_is_refused_naming_the_pin(preflight):
    result = preflight["wheel_unpinned"]
    assert result["task"] == "Assert every lock entry the method uses is pinned"
    msg = flat(result["msg"])
    assert "rmm_wheel_unpinned have no sha256" in msg
    assert "efa-image lock update NAME" in msg and "--allow-unpinned" in msg


def test_allow_unpinned_accepts_the_unpinned_wheel(preflight):
    assert preflight["wheel_unpinned_allowed"].get("passed"), preflight["wheel_unpinned_allowed"]


def test_a_wheel_that_is_not_librmm_is_refused(preflight):
    result = preflight["wheel_not_librmm"]
    assert result["task"] == CUDA_TASK
    assert "not a librmm-cuXX wheel" in flat(result["msg"])


def test_unknown_method_is_refused(preflight):
    result = preflight["unknown_method"]
    assert result["task"] == "Assert the method and GPU architectures are valid"
    assert "rmm_method must be one of wheel, source (got pip)" in flat(result["msg"])


def test_source_method_refuses_the_unpinned_github_archives(preflight):
    result = preflight["source_unpinned"]
    assert result["task"] == "Assert every lock entry the method uses is pinned"
    msg = flat(result["msg"])
    for name in ("rmm", "rapids_cmake", "cccl", "nvtx3"):
        assert name in msg.split("have no sha256")[0]
    assert "cpm_cmake" not in msg  # pinned from rapids-cmake's own checksum


def test_argument_specs_refuse_an_unknown_method():
    """The role's own entry point validates its arguments before the preflight runs."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    specs = yaml.safe_load((ROOT / "roles/rmm/meta/argument_specs.yml").read_text())
    validator = ArgumentSpecValidator(specs["argument_specs"]["main"]["options"])
    assert not validator.validate({"rmm_method": "wheel"}).error_messages
    errors = validator.validate({"rmm_method": "pip"}).error_messages
    assert any("rmm_method must be one of: wheel, source" in error for error in errors), errors


def test_lock_pins_the_wheels_the_wheel_method_uses():
    for name in ("rmm_wheel", "rapids_logger_wheel", "cmake_wheel"):
        entry = LOCK["efa_image_artifacts"][name]
        assert entry["kind"] == "wheel" and len(entry["sha256"]) == 64, name
    assert WHEEL["filename"].startswith("librmm_cu12-")
