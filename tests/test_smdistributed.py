"""smdistributed: the table of AWS's wheel builds, the choice of a build, the refusals."""

import json
import re
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from efa_image.artifacts import context, lock, lock_edit, preflight
from efa_image.building import flavors
from efa_image.compat import smdistributed
from efa_image.compat.pytorch import Image
from efa_image.compat.smdistributed import Pin, SelectionError
from localplay import lock_file, run_playbook

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "src/efa_image/data/smdistributed_builds.yml"
LOCK = ROOT / "playbooks/group_vars/all/versions.yml"
DP_260 = (
    "https://smdataparallel.s3.us-east-1.amazonaws.com/binary/pytorch/2.5.1/cu124/03-10-25/"
    "smdistributed_dataparallel-2.6.0-cp311-cp311-linux_x86_64.whl"
)
DP_250 = (
    "https://smdataparallel.s3.us-east-1.amazonaws.com/binary/pytorch/2.4.0/cu124/2024-11-04/"
    "smdistributed_dataparallel-2.5.0-cp311-cp311-linux_x86_64.whl"
)
# The guide's pair ("bring your own container"), shipped together in AWS's PyTorch 1.10.2 image.
GUIDE_MP = (
    "https://sagemaker-distributed-model-parallel.s3.us-west-2.amazonaws.com/pytorch-1.10.0/"
    "build-artifacts/2022-02-21-19-26/smdistributed_modelparallel-1.7.0-cp38-cp38-linux_x86_64.whl"
)
GUIDE_DP = (
    "https://smdataparallel.s3.amazonaws.com/binary/pytorch/1.10.2/cu113/2022-02-18/"
    "smdistributed_dataparallel-1.4.0-cp38-cp38-linux_x86_64.whl"
)


def pin_of(url, name="smdistributed_dataparallel", sha256="ab" * 32):
    filename = url.rsplit("/", 1)[-1]
    return Pin(name, filename.split("-")[1], filename, url, sha256)


# --- The data file -----------------------------------------------------------


def test_data_file_is_well_formed():
    """Read without the loader: every entry names its PyTorch, CUDA, Python tag and URL,
    and the URL's file name and path agree with them."""
    data = yaml.safe_load(DATA.read_text())
    assert set(data) == {"modelparallel", "dataparallel"}
    urls = []
    for library, entries in data.items():
        assert entries, library
        for entry in entries:
            assert set(entry) - {"also"} == {"version", "pytorch", "cuda", "python", "url"}
            version, pytorch, cuda, tag, url = (
                entry[k] for k in ("version", "pytorch", "cuda", "python", "url")
            )
            assert all(isinstance(v, str) for v in (version, pytorch, cuda, tag, url)), entry
            assert re.fullmatch(r"\d+\.\d+\.\d+", version) and re.fullmatch(
                r"\d+\.\d+\.\d+", pytorch
            )
            assert re.fullmatch(r"\d+\.\d+", cuda) and re.fullmatch(r"cp3\d+", tag), entry
            assert url.startswith("https://") and url.endswith(
                f"/smdistributed_{library}-{version}-{tag}-{tag}-linux_x86_64.whl"
            ), entry
            if library == "dataparallel":
                assert f"/pytorch/{pytorch}/cu{cuda.replace('.', '')}/" in url, entry
            else:
                assert f"/pytorch-{pytorch}/" in url, entry
            for fit in entry.get("also", []):
                assert set(fit) == {"pytorch", "cuda"} and (fit["pytorch"], fit["cuda"]) != (
                    pytorch,
                    cuda,
                ), entry
            urls.append(url)
    assert len(urls) == len(set(urls))
    # Model parallel v1 ends at 1.15.0 (PyTorch 2.0): nothing newer is a wheel.
    assert max(tuple(map(int, e["version"].split("."))) for e in data["modelparallel"]) == (
        1,
        15,
        0,
    )


def test_loader_reads_the_packaged_table():
    builds = smdistributed.load_builds()
    assert {b.url for b in builds["dataparallel"]} >= {DP_260, GUIDE_DP}
    assert GUIDE_MP in {b.url for b in builds["modelparallel"]}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda e: e.update(version="2.6.1"), "file name must start"),
        (lambda e: e.update(python="py311"), "not a tag such as cp311"),
        (lambda e: e.update(pytorch="2.4.0"), "names another PyTorch/CUDA"),
        (lambda e: e.update(cuda="12.1"), "names another PyTorch/CUDA"),
        (lambda e: e.update(cuda="12"), "not a version such as 12.4"),
        (lambda e: e.pop("python"), "missing \\['python'\\]"),
        (lambda e: e.update(also=[{"pytorch": "2.5"}]), "expected {pytorch: X.Y.Z, cuda: X.Y}"),
    ],
)
def test_loader_refuses_a_malformed_entry(tmp_path, change, message):
    data = yaml.safe_load(DATA.read_text())
    change(data["dataparallel"][-1])
    path = tmp_path / "builds.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(smdistributed.BuildsError, match=message):
        smdistributed.load_builds(path)


def test_loader_refuses_a_url_listed_twice(tmp_path):
    data = yaml.safe_load(DATA.read_text())
    data["dataparallel"].append(dict(data["dataparallel"][-1]))
    path = tmp_path / "builds.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(smdistributed.BuildsError, match="twice"):
        smdistributed.load_builds(path)


# --- Selection -------------------------------------------------------------------


def test_the_lock_build_that_fits_is_selected():
    build = smdistributed.select("dataparallel", Image("2.5.1", "12.4", "cp311"), pin_of(DP_260))
    assert (build.version, build.pytorch, build.cuda, build.python) == (
        "2.6.0",
        "2.5.1",
        "12.4",
        "cp311",
    )
    assert build.distribution == "smdistributed-dataparallel"


def test_the_guides_pair_fits_one_image():
    """Model parallel built for 1.10.0 shipped in the PyTorch 1.10.2 image beside data parallel."""
    image = Image("1.10.2", "11.3", "cp38")
    model = smdistributed.select(
        "modelparallel", image, pin_of(GUIDE_MP, "smdistributed_modelparallel")
    )
    data = smdistributed.select("dataparallel", image, pin_of(GUIDE_DP))
    assert (model.version, data.version) == ("1.7.0", "1.4.0")


def test_model_parallel_1_15_fits_pytorch_2_0_on_cuda_11_8_only():
    fits = smdistributed.fitting("modelparallel", Image("2.0.0", "11.8", "cp310"))
    assert [b.version for b in fits] == ["1.15.0"]
    assert smdistributed.fitting("modelparallel", Image("2.0.0", "11.8", "cp311")) == []
    assert smdistributed.fitting("modelparallel", Image("2.0.0", "12.1", "cp310")) == []


def test_no_build_for_the_image_names_the_known_ones():
    with pytest.raises(SelectionError) as raised:
        smdistributed.select("dataparallel", Image("2.4.0", "12.1", "cp311"), pin_of(DP_260))
    message = str(raised.value)
    assert "no smdistributed-dataparallel build for PyTorch 2.4.0/cu121/cp311" in message
    assert (
        "known: 2.6.0 (PyTorch 2.5.1, cu124, cp311), 2.5.0 (PyTorch 2.4.0, cu124, cp311)" in message
    )
    assert "smdistributed_dataparallel: false" in message


def test_a_lock_build_for_another_pytorch_names_the_one_that_fits():
    with pytest.raises(SelectionError) as raised:
        smdistributed.select("dataparallel", Image("2.4.0", "12.4", "cp311"), pin_of(DP_260))
    message = str(raised.value)
    assert (
        "2.6.0 (PyTorch 2.5.1, cu124, cp311), which does not fit PyTorch 2.4.0/cu124/cp311"
        in message
    )
    assert DP_250 in message and "`efa-image lock update smdistributed_dataparallel`" in message
    assert DP_260 not in message.split("one of:")[1]


def test_a_lock_url_that_is_no_known_build_is_refused():
    unknown = Pin(
        "smdistributed_dataparallel",
        "2.6.0",
        "smdistributed_dataparallel-2.6.0-cp311-cp311-linux_x86_64.whl",
        "https://example.invalid/smdistributed_dataparallel-2.6.0-cp311-cp311-linux_x86_64.whl",
        "ab" * 32,
    )
    with pytest.raises(SelectionError, match="no build of src/efa_image/data") as raised:
        smdistributed.select("dataparallel", Image("2.5.1", "12.4", "cp311"), unknown)
    assert DP_260 in str(raised.value)


def test_unpinned_wheels_are_refused_unless_allowed():
    image, pin = Image("2.5.1", "12.4", "cp311"), pin_of(DP_260, sha256="")
    with pytest.raises(SelectionError) as raised:
        smdistributed.select("dataparallel", image, pin)
    assert "has no sha256 in the lock" in str(raised.value)
    assert "`efa-image lock update smdistributed_dataparallel`" in str(raised.value)
    assert "--allow-unpinned" in str(raised.value)
    assert smdistributed.select("dataparallel", image, pin, allow_unpinned=True).version == "2.6.0"


def test_model_parallel_without_pytorch_names_the_fix():
    pin = pin_of(GUIDE_MP, "smdistributed_modelparallel")
    with pytest.raises(SelectionError) as raised:
        smdistributed.select("modelparallel", Image("", "", "cp38"), pin)
    message = str(raised.value)
    assert "smdistributed-modelparallel needs PyTorch" in message
    assert "pytorch role before smdistributed" in message
    assert "smdistributed_modelparallel: false" in message


def test_model_parallel_on_pytorch_2_5_says_v2_is_no_wheel():
    pin = pin_of(GUIDE_MP, "smdistributed_modelparallel")
    with pytest.raises(SelectionError, match=r"model parallel v2 .* is no wheel"):
        smdistributed.select("modelparallel", Image("2.5.1", "12.4", "cp311"), pin)


def test_plan_names_every_refusal_at_once():
    probe = {"torch": "2.5.1+cu124", "cuda": "12.4", "python": "cp311"}
    entry = {"name": "smdistributed_dataparallel", "version": "2.6.0", "urls": [DP_260]}
    entry["filename"] = DP_260.rsplit("/", 1)[-1]
    model = {
        "name": "smdistributed_modelparallel",
        "version": "1.7.0",
        "filename": GUIDE_MP.rsplit("/", 1)[-1],
        "urls": [GUIDE_MP],
        "sha256": "ab" * 32,
    }
    refused = smdistributed.plan(probe, {"dataparallel": entry, "modelparallel": model})
    assert not refused["ok"] and refused["builds"] == {}
    assert "has no sha256" in refused["message"] and "model parallel v2" in refused["message"]
    accepted = smdistributed.plan(probe, {"dataparallel": entry}, allow_unpinned=True)
    assert accepted["ok"] and accepted["message"] == ""
    assert accepted["builds"]["dataparallel"]["filename"] == entry["filename"]
    assert accepted["image"] == {"pytorch": "2.5.1", "cuda": "12.4", "python": "cp311"}


# --- The lock and the pre-flight -------------------------------------------------


def test_the_projects_lock_pins_known_builds(tmp_path):
    loaded = lock.load(LOCK)
    entries = [a for a in loaded.artifacts.values() if a.role == "smdistributed"]
    assert {a.name for a in entries} == set(smdistributed.LOCK_NAMES.values())
    assert smdistributed.lock_problems(entries, None) == []
    # `efa-image lock update NAME` rewrites that entry's sha256 line and no other.
    for artifact in entries:
        path = tmp_path / f"{artifact.name}.yml"
        path.write_text(lock_edit.set_sha256(LOCK.read_text(), artifact.name, "0" * 64))
        pinned = {a.name: a.sha256 for a in lock.load(path).artifacts.values()}
        assert pinned[artifact.name] == "0" * 64
        others = {n: s for n, s in pinned.items() if n != artifact.name}
        assert others == {
            a.name: a.sha256 for a in loaded.artifacts.values() if a.name != artifact.name
        }


def test_the_default_lock_never_needs_model_parallel_in_a_flavor():
    """No v1 build fits the PyTorch 2.5.1 that data parallel 2.6.0 needs."""
    catalog = flavors.load_catalog()
    loaded = lock.load(LOCK)
    for profile in catalog.profiles:
        names = {a.name for a in catalog.needed(loaded, "sagemaker", profile)}
        assert "smdistributed_modelparallel" not in names, profile
        assert "smdistributed_dataparallel" in names, profile


def test_lock_entry_that_is_no_known_build_is_named(tmp_path):
    path = tmp_path / "versions.yml"
    path.write_text(
        textwrap.dedent(f"""\
        efa_image_artifacts:
          smdistributed_dataparallel:
            kind: wheel
            version: "2.6.1"
            role: smdistributed
            filename: smdistributed_dataparallel-{{version}}-cp311-cp311-linux_x86_64.whl
            urls: ["{DP_260.replace("2.6.0-", "{version}-")}"]
            sha256: ""
        """)
    )
    entries = list(lock.load(path).artifacts.values())
    [problem] = smdistributed.lock_problems(entries, None)
    assert (
        "smdistributed_dataparallel (2.6.1, " in problem
        and "no known smdistributed build" in problem
    )


@pytest.mark.parametrize(
    ("roles", "refused"),
    [
        (["nccl", "smdistributed"], True),
        (["nccl", "smdistributed", "pytorch"], True),
        (["nccl", "pytorch", "smdistributed"], False),
        (["nccl"], False),
    ],
)
def test_a_flavor_needs_pytorch_before_smdistributed(roles, refused):
    problems = smdistributed.lock_problems([], roles)
    assert bool(problems) == refused
    if refused:
        assert "put pytorch before smdistributed" in problems[0]


def wheel(name, filename, role="pytorch", url="https://files.pythonhosted.org/x"):
    version = filename.split("-")[1]
    return lock.Artifact(name, version, role, filename, (url,), "ab" * 32)


DP_260_ENTRY = wheel(
    "smdistributed_dataparallel",
    DP_260.rsplit("/", 1)[-1],
    role="smdistributed",
    url=DP_260,
)
CUDA_RUNTIME = wheel(
    "pytorch/nvidia-cuda-runtime-cu12",
    "nvidia_cuda_runtime_cu12-12.4.127-py3-none-manylinux2014_x86_64.whl",
)


def test_a_flavor_whose_pytorch_no_lock_build_fits_is_refused():
    torch = wheel("pytorch/torch", "torch-2.4.0-cp311-cp311-manylinux1_x86_64.whl")
    roles = ["pytorch", "smdistributed"]
    [problem] = smdistributed.lock_problems([torch, CUDA_RUNTIME, DP_260_ENTRY], roles)
    assert "does not fit the lock's PyTorch 2.4.0/cu124/cp311" in problem
    assert DP_250 in problem
    # A mirror or a fetch by name installs nothing together: no such check there.
    assert smdistributed.lock_problems([torch, CUDA_RUNTIME, DP_260_ENTRY], None) == []
    torch_251 = wheel("pytorch/torch", "torch-2.5.1-cp311-cp311-manylinux1_x86_64.whl")
    assert smdistributed.lock_problems([torch_251, CUDA_RUNTIME, DP_260_ENTRY], roles) == []


class NoDownloads:
    """A store the pre-flight must not reach: the smdistributed rules come first."""

    mirror = None

    def preflight(self, artifacts):
        raise AssertionError(f"store asked for {[a.name for a in artifacts]}")


def test_preflight_refuses_before_any_download(tmp_path):
    path = tmp_path / "versions.yml"
    path.write_text(
        textwrap.dedent("""\
        efa_image_artifacts:
          smdistributed_dataparallel:
            kind: wheel
            version: "2.6.0"
            role: smdistributed
            filename: smdistributed_dataparallel-{version}-cp311-cp311-linux_x86_64.whl
            urls: ["https://example.invalid/smdistributed_dataparallel-{version}-cp311-cp311-linux_x86_64.whl"]
            sha256: ""
        """)
    )
    ctx = context.Context(lock.load(path), NoDownloads(), flavors.load_catalog(), [])
    with pytest.raises(SelectionError, match="nothing was fetched or built"):
        preflight.run(ctx, ctx.select(["smdistributed_dataparallel"], None, None))


# --- The role's pre-flight, through Ansible ---------------------------------------
# The role's preflight tasks on localhost, one case per interpreter and
# variables. The stand-in interpreters are this Python with a directory on
# PYTHONPATH holding only a torch/version.py (the probe reads that file and
# never imports torch): they say which PyTorch the image holds, nothing more.
# No smdistributed wheel is involved; nothing is installed.

ROLE_CASES = {
    "no torch": {"python": "plain", "vars": {}},
    "pytorch 2.4.0 cu121": {"python": "2.4.0+cu121/12.1", "vars": {}},
    "pytorch 2.5.1 unpinned": {"python": "2.5.1+cu124/12.4", "vars": {}},
    "pytorch 2.5.1 allowed": {"python": "2.5.1+cu124/12.4", "vars": {"allow_unpinned": True}},
    "modelparallel on 2.5.1": {
        "python": "2.5.1+cu124/12.4",
        "vars": {"modelparallel": True, "allow_unpinned": True},
    },
    "nothing asked for": {"python": "2.5.1+cu124/12.4", "vars": {"dataparallel": False}},
}
# Each case's values under the role's variable names (the cases' keys are short).
CASE_VARS = {
    "smdistributed_python": "{{ item.value.python }}",
    "smdistributed_modelparallel": "{{ item.value.modelparallel | default(false) }}",
    "smdistributed_dataparallel": "{{ item.value.dataparallel | default(true) }}",
    "artifact_allow_unpinned": "{{ item.value.allow_unpinned | default(false) }}",
}
ROLE_CASE = [
    {
        "name": "Apply the role's preflight to {{ item.key }}",
        "block": [
            {
                "name": "Include the smdistributed role's preflight",
                "ansible.builtin.include_role": {
                    "name": "smdistributed",
                    "tasks_from": "preflight",
                },
                "vars": CASE_VARS,
            },
            {
                "name": "Record the chosen builds",
                "ansible.builtin.set_fact": {
                    "__results": "{{ __results | combine({item.key: {'builds': "
                    "__smdistributed_plan.builds, 'prefixes': __smdistributed_prefixes}}) }}"
                },
            },
        ],
        "rescue": [
            {
                "name": "Record the refusal",
                "ansible.builtin.set_fact": {
                    "__results": "{{ __results | combine({item.key: {"
                    "'task': ansible_failed_task.name,"
                    " 'msg': ansible_failed_result.msg | default('')}}) }}"
                },
            }
        ],
    }
]


def stand_in_python(directory, spec):
    """An interpreter whose site holds torch/version.py saying VERSION/CUDA (or no torch)."""

    directory.mkdir()
    wrapper = directory / "python"
    path = ""
    if spec != "plain":
        version, cuda = spec.split("/")
        (directory / "site" / "torch").mkdir(parents=True)
        (directory / "site" / "torch" / "__init__.py").write_text("")
        (directory / "site" / "torch" / "version.py").write_text(
            f"__version__ = {version!r}\ncuda = {cuda!r}\n"
        )
        path = f"PYTHONPATH={directory / 'site'} "
    wrapper.write_text(f'#!/bin/sh\n{path}exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.fixture(scope="module")
def role_preflight(tmp_path_factory):

    tmp = tmp_path_factory.mktemp("smdistributed-preflight")
    cases = {}
    for index, (name, case) in enumerate(ROLE_CASES.items()):
        python = stand_in_python(tmp / f"python{index}", case["python"])
        cases[name] = {"python": python, **case["vars"]}
    (tmp / "case.yml").write_text(yaml.safe_dump(ROLE_CASE, sort_keys=False))
    play = [
        {
            "name": "Preflight of the smdistributed role",
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": True,
            "vars": {
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                "__results": {},
            },
            "tasks": [
                {
                    "name": "Run each case",
                    "ansible.builtin.include_tasks": "case.yml",
                    "loop": "{{ __cases | dict2items }}",
                    "vars": {"__cases": cases},
                },
                {
                    "name": "Write the results",
                    "ansible.builtin.copy": {
                        "dest": str(tmp / "results.json"),
                        "content": "{{ __results | to_json }}",
                        "mode": "0644",
                    },
                    "check_mode": False,
                },
            ],
        }
    ]
    lock_file(tmp).write_text(LOCK.read_text())
    (tmp / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    # Check mode: the role fetches nothing then (no wheel is reachable here).
    proc = run_playbook(tmp / "play.yml", "--check", env={"EFA_IMAGE_MIRROR": ""})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((tmp / "results.json").read_text())


def words(text):
    return " ".join(text.split())


def test_role_refuses_an_image_without_pytorch(role_preflight):
    result = role_preflight["no torch"]
    assert "smdistributed-dataparallel needs PyTorch in the image's Python" in words(result["msg"])


def test_role_refuses_a_pytorch_no_build_fits_naming_the_known_ones(role_preflight):
    message = words(role_preflight["pytorch 2.4.0 cu121"]["msg"])
    assert "no smdistributed-dataparallel build for PyTorch 2.4.0/cu121/cp311" in message
    assert "known: 2.6.0 (PyTorch 2.5.1, cu124, cp311)" in message


def test_role_refuses_the_unpinned_wheel_unless_allowed(role_preflight):
    assert "has no sha256 in the lock" in words(role_preflight["pytorch 2.5.1 unpinned"]["msg"])
    allowed = role_preflight["pytorch 2.5.1 allowed"]
    assert allowed["builds"]["dataparallel"]["url"] == DP_260
    assert allowed["prefixes"]["dataparallel"].endswith("/site-packages/smdistributed/dataparallel")


def test_role_refuses_model_parallel_on_pytorch_2_5(role_preflight):
    message = words(role_preflight["modelparallel on 2.5.1"]["msg"])
    assert "no smdistributed-modelparallel build for PyTorch 2.5.1/cu124/cp311" in message
    assert "model parallel v2 (PyTorch 2.x) is no wheel" in message


def test_role_refuses_when_no_library_is_asked_for(role_preflight):
    result = role_preflight["nothing asked for"]
    assert result["task"] == "Assert the method and libraries are valid"
