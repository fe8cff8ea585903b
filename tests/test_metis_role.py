"""The metis role's verifier (files/metis_check.py) and its preflight's refusals.

The verifier's judgement is tested on the results a broken METIS would give
(the molecule scenario runs it on real installations). The preflight runs with
ansible-playbook against localhost as `tasks_from: preflight` in check mode, so
that nothing past it can run here even if an assertion let bad input through
(tags would not stop it: an included role inherits the include's tags); the
argument specs, which a run of the role checks first, are checked on their own.
"""

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from localplay import lock_file, run_playbook

ROOT = Path(__file__).resolve().parents[1]
ROLE = ROOT / "roles" / "metis"
COMMON_FILES = ROOT / "roles" / "common" / "files"
HEADER = textwrap.dedent("""\
    #define IDXTYPEWIDTH 32
    #define REALTYPEWIDTH 32
    #define METIS_VER_MAJOR         5
    #define METIS_VER_MINOR         1
    #define METIS_VER_SUBMINOR      0
    """)


def load_check():
    # The script imports common's library_check, which the role sends with it.
    if str(COMMON_FILES) not in sys.path:
        sys.path.append(str(COMMON_FILES))
    spec = importlib.util.spec_from_file_location("metis_check", ROLE / "files" / "metis_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check = load_check()


def test_the_known_graph_is_two_5_cliques_joined_by_one_edge():
    xadj, adjncy = check.graph()
    assert len(xadj) == 11 and xadj[-1] == len(adjncy) == 2 * (10 + 10 + 1)
    edges = {(v, u) for v in range(10) for u in adjncy[xadj[v] : xadj[v + 1]]}
    assert all((u, v) in edges for v, u in edges)
    assert {e for e in edges if (e[0] < 5) != (e[1] < 5)} == {(4, 5), (5, 4)}


def test_header_facts():
    facts = check.header_facts(HEADER.replace("IDXTYPEWIDTH 32", "IDXTYPEWIDTH 64"))
    assert facts == {"header_idx_width": 64, "header_real_width": 32, "header_version": "5.1.0"}
    assert check.header_facts("/* IDXTYPEWIDTH 32 */\n")["header_idx_width"] is None


@pytest.mark.parametrize(
    ("result", "problem"),
    [
        ({"status": 1, "edgecut": 1, "part": [0] * 5 + [1] * 5}, None),
        ({"status": 1, "edgecut": 1, "part": [1] * 5 + [0] * 5}, None),
        ({"status": -2, "edgecut": 1, "part": [0] * 5 + [1] * 5}, "returned -2, not METIS_OK"),
        ({"status": 1, "edgecut": 1, "part": [0] * 10}, "not one part per clique"),
        ({"status": 1, "edgecut": 5, "part": [0] * 4 + [1] * 6}, "(edge cut 5)"),
        ({"status": 1, "edgecut": 1, "part": [0] * 5 + [1] * 4 + [0]}, "not one part per clique"),
    ],
)
def test_a_wrong_partition_is_a_problem(result, problem):
    problems = check.partition_problems(result)
    assert problems == [] if problem is None else problem in problems[0]


def test_missing_header_and_library_are_problems(tmp_path, capsys):
    arguments = ["--library", str(tmp_path / "libmetis.so"), "--header", str(tmp_path / "metis.h")]
    assert check.main([*arguments, "--width", "32", "--version", "5.1.0"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert problems[0].startswith(f"cannot read {tmp_path / 'metis.h'}")
    assert problems[1].startswith(f"dlopen({tmp_path / 'libmetis.so'}) failed")


def test_a_header_of_the_other_width_is_a_problem(tmp_path, capsys):
    (tmp_path / "metis.h").write_text(HEADER)
    arguments = ["--library", str(tmp_path / "libmetis.so"), "--header", str(tmp_path / "metis.h")]
    assert check.main([*arguments, "--width", "64", "--version", "5.1.0"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert problems[0] == f"{tmp_path / 'metis.h'} has IDXTYPEWIDTH 32, not 64"


def set_width(tmp_path, header, width):
    """The source build's first step, as vars/main.yml has it, on a copy of metis.h."""
    script = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["_metis_set_width_script"]
    (tmp_path / "include").mkdir(exist_ok=True)
    (tmp_path / "include" / "metis.h").write_text(header)
    proc = subprocess.run(["sh", "-c", script, "set-width", str(width)], cwd=tmp_path, check=False)
    return proc.returncode, (tmp_path / "include" / "metis.h").read_text()


def test_the_width_step_edits_metis_h(tmp_path):
    assert set_width(tmp_path, HEADER, 64) == (
        0,
        HEADER.replace("IDXTYPEWIDTH 32", "IDXTYPEWIDTH 64"),
    )
    assert set_width(tmp_path, HEADER, 32) == (0, HEADER)


def test_the_width_step_fails_where_metis_h_has_no_such_line(tmp_path):
    header = HEADER.replace("#define IDXTYPEWIDTH 32", "#define IDXTYPEWIDTH  32 /* edited */")
    assert set_width(tmp_path, header, 64) == (1, header)


GOOD = {"method": "source", "width": 32, "prefix": "/opt/metis", "artifact": "metis"}
CASES = {
    "unknown method": {**GOOD, "method": "conda"},
    "width 48": {**GOOD, "width": 48},
    "shared prefix": {**GOOD, "prefix": "/usr/local/"},
    "package elsewhere": {**GOOD, "method": "package"},
    "metis 5.2": {**GOOD, "artifact": "metis52"},
    "source 64": {**GOOD, "width": 64},
}


# The role's variables for a case (its values under these names).
CASE_VARS = {
    "metis_method": "{{ item.value.method }}",
    "metis_idx_type_width": "{{ item.value.width }}",
    "metis_prefix": "{{ item.value.prefix }}",
    "metis_artifact": "{{ item.value.artifact }}",
}
# One case: only the preflight's task file runs, its refusal or result recorded.
CASE = [
    {
        "name": "Apply the role's preflight to {{ item.key }}",
        "block": [
            {
                "name": "Include the metis role's preflight",
                "ansible.builtin.include_role": {"name": "metis", "tasks_from": "preflight"},
                "vars": CASE_VARS,
            },
            {
                "name": "Record that the preflight passed",
                "ansible.builtin.set_fact": {
                    "__results": "{{ __results | combine({item.key: {'passed': true,"
                    " 'version': __metis_version, 'sha256': __metis_artifact.sha256}}) }}"
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


def play(tmp):
    specs = ROLE / "meta" / "argument_specs.yml"
    return [
        {
            "name": "Preflight of the metis role",
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": True,
            "vars": {
                "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                "__results": {},
                "__cases": CASES,
                "__specs": f"{{{{ lookup('ansible.builtin.file', '{specs}') | from_yaml }}}}",
            },
            "tasks": [
                {
                    "name": "Run each case",
                    "ansible.builtin.include_tasks": "case.yml",
                    "loop": "{{ __cases | dict2items }}",
                },
                {
                    "name": "Check each case against the role's argument specs",
                    "ansible.builtin.validate_argument_spec": {
                        "argument_spec": "{{ __specs.argument_specs.main.options }}",
                        "provided_arguments": CASE_VARS,
                    },
                    "loop": "{{ __cases | dict2items }}",
                    "register": "__specs_checked",
                    "failed_when": False,
                },
                {
                    "name": "Record what the argument specs say",
                    "ansible.builtin.set_fact": {
                        "__results": "{{ __results | combine({item.item.key: {'spec_errors':"
                        " item.argument_errors | default([])}}, recursive=true) }}"
                    },
                    "loop": "{{ __specs_checked.results }}",
                    "loop_control": {"label": "{{ item.item.key }}"},
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


@pytest.fixture(scope="module")
def preflight(tmp_path_factory):
    """Each case's failed task and message, or its wanted version where it passed."""
    tmp = tmp_path_factory.mktemp("metis-preflight")
    lock = yaml.safe_load((ROOT / "playbooks/group_vars/all/versions.yml").read_text())
    artifacts = lock["efa_image_artifacts"]
    artifacts["metis52"] = {**artifacts["metis"], "version": "5.2.1"}
    lock_file(tmp).write_text(yaml.safe_dump(lock))
    (tmp / "case.yml").write_text(yaml.safe_dump(CASE, sort_keys=False))
    (tmp / "play.yml").write_text(yaml.safe_dump(play(tmp), sort_keys=False))
    proc = run_playbook(tmp / "play.yml", "--check")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((tmp / "results.json").read_text())


def words(text):
    return " ".join(text.split())


def test_the_argument_specs_refuse_an_unknown_method_and_width(preflight):
    errors = {case: result["spec_errors"] for case, result in preflight.items()}
    assert errors.pop("unknown method") == [
        "value of metis_method must be one of: source, package, got: conda"
    ]
    assert errors.pop("width 48") == [
        "value of metis_idx_type_width must be one of: 32, 64, got: 48"
    ]
    assert all(found == [] for found in errors.values()), errors


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (
            "unknown method",
            "metis_method must be one of source, package (got conda; a profile sets it)",
        ),
        ("width 48", "metis_idx_type_width 32 or 64, the bits of METIS's idx_t (got 48:"),
        ("shared prefix", "metis_prefix /usr/local/ would be removed and replaced whole"),
        ("shared prefix", "such as /opt/metis (the default)"),
        (
            "package elsewhere",
            "installs the distribution's METIS into /usr, but metis_prefix is /opt/metis",
        ),
        ("metis 5.2", "METIS 5.2.1 (metis52 in the lock) is not a 5.1 release"),
    ],
)
def test_bad_input_is_refused_naming_the_fix(preflight, case, message):
    assert "passed" not in preflight[case]
    assert message in words(preflight[case]["msg"])


def test_bad_input_is_refused_before_anything_but_the_preflight(preflight):
    tasks = {case: result.get("task", "") for case, result in preflight.items()}
    assert (
        tasks["unknown method"]
        == tasks["width 48"]
        == "Assert the method and index width are known"
    )
    assert tasks["shared prefix"] == "Assert the source build's prefix is a directory of its own"
    assert tasks["metis 5.2"] == "Assert the archive is a METIS 5.1 release"


def test_good_input_passes_the_preflight(preflight):
    metis = yaml.safe_load((ROOT / "playbooks/group_vars/all/versions.yml").read_text())
    pinned = metis["efa_image_artifacts"]["metis"]
    passed = {"passed": True, "version": "5.1.0", "sha256": pinned["sha256"], "spec_errors": []}
    assert preflight["source 64"] == passed
