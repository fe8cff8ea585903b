"""Wheel sets in the lock (kind: wheelset): parsing, selection, resolution, lock update.

The resolution tests run pip's real resolver against a PEP 503 index in a
temporary directory, holding wheels built here (a dependency, a wheel for
another Python, one for too new a glibc, one left out on purpose).
"""

import hashlib
import json
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import yaml

from efa_image import cli
from efa_image.artifacts import artifact_store, lock, wheelset
from localplay import lock_file, run_playbook

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
CP = f"cp{sys.version_info.major}{sys.version_info.minor}"
OTHER_CP = f"cp{sys.version_info.major}{sys.version_info.minor + 1}"
SHA = "a" * 64


def member(filename, urls=("https://files.example/x.whl",), sha256=SHA):
    return {"filename": filename, "urls": list(urls), "sha256": sha256}


def set_entry(**overrides):
    fields = {
        "kind": "wheelset",
        "version": "1.0",
        "role": "pytorch",
        "methods": ["wheel"],
        "wheels": [
            member(f"torchlike-1.0-{CP}-{CP}-manylinux1_x86_64.whl"),
            member("Dep_A-2.0-py3-none-any.whl", sha256="b" * 64),
        ],
    }
    fields.update(overrides)
    return fields


def parse(entries):
    return lock.parse_entries(entries, [], "versions.yml")


def test_a_set_becomes_one_wheel_artifact_per_file():
    parsed = parse({"torchset": set_entry()})
    assert sorted(parsed) == ["torchset/dep-a", "torchset/torchlike"]
    dep = parsed["torchset/dep-a"]
    assert (dep.kind, dep.version, dep.role, dep.methods) == ("wheel", "2.0", "pytorch", ("wheel",))
    assert (dep.wheelset, dep.wheelset_version, dep.sha256) == ("torchset", "1.0", "b" * 64)
    # Mirror and cache treat each file as any artifact: <name>/<version>/<filename>.
    assert dep.mirror_path() == "torchset/dep-a/2.0/Dep_A-2.0-py3-none-any.whl"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"wheels": []}, r"\.wheels: no wheels resolved: run `efa-image lock update torchset`"),
        (
            {"wheels": [member("notawheel.tar.gz")]},
            r"\.wheels\[0\]: 'notawheel.tar.gz' is not a wheel",
        ),
        ({"wheels": [member("a-1-py3-none-any.whl", sha256="")]}, r"\.wheels\[0\]\.sha256"),
        ({"wheels": [{"filename": "a-1-py3-none-any.whl"}]}, r"expected exactly the fields"),
        (
            {"wheels": [member("a-1-py3-none-any.whl"), member("A-2-py3-none-any.whl")]},
            r"\.wheels\[1\]: a is listed twice",
        ),
        ({"wheels": [member("a-1-py3-none-any.whl", urls=["ftp://x"])]}, r"is not an http"),
        ({"filename": "x"}, r"unknown field\(s\) filename"),
        ({"role": ""}, r"missing role"),
    ],
)
def test_malformed_sets_are_rejected_naming_the_field(fields, message):
    with pytest.raises(lock.LockError, match=message):
        parse({"torchset": set_entry(**fields)})


def test_a_sets_name_selects_all_its_files(tmp_path):
    path = tmp_path / "versions.yml"
    entries = {
        "torchset": set_entry(),
        "single": {"version": "1", "role": "x", "filename": "f", "urls": ["https://x/f"]},
    }
    path.write_text(yaml.safe_dump({lock.LOCK_KEY: entries}))
    loaded = lock.load(path)
    assert [a.name for a in loaded.select(["torchset"])] == ["torchset/torchlike", "torchset/dep-a"]
    assert [a.name for a in loaded.select(["torchset/dep-a", "torchset"])] == [
        "torchset/dep-a",
        "torchset/torchlike",
    ]
    with pytest.raises(
        lock.LockError, match=r"unknown component 'torch' \(known: single, torchset\)"
    ):
        loaded.select(["torch"])


def test_an_overlay_may_replace_a_sets_wheels(tmp_path):
    overlay = tmp_path / "overlay.yml"
    overlay.write_text(
        yaml.safe_dump(
            {lock.OVERLAY_KEY: {"torchset": {"wheels": [member("other-3.0-py3-none-any.whl")]}}}
        )
    )
    parsed = lock.parse_entries({"torchset": set_entry()}, [overlay], "versions.yml")
    assert list(parsed) == ["torchset/other"]


def test_platforms_widen_to_every_older_manylinux():
    tags = wheelset.platforms("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64" and "manylinux_2_29_x86_64" not in tags
    assert {"manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"} <= set(tags)
    assert wheelset.platforms("linux_aarch64") == ["linux_aarch64"]


def spec(index, **overrides):
    fields = {
        "name": "torchset",
        "version": "1.0",
        "requirements": ("torchlike==1.0",),
        "python": PYTHON,
        "platform": "manylinux_2_28_x86_64",
        "index": index,
        "exclude": ("nccl-like",),
    }
    fields.update(overrides)
    return wheelset.Spec(**fields)


def test_a_resolution_for_another_python_or_machine_is_refused():
    with pytest.raises(wheelset.ResolveError, match=r"from a virtualenv of Python 3\.13 on x86_64"):
        wheelset.check_interpreter(spec("https://x", python="3.13"), "3.11", "x86_64")
    with pytest.raises(wheelset.ResolveError, match=r"on aarch64"):
        wheelset.check_interpreter(
            spec("https://x", platform="manylinux_2_28_aarch64"), PYTHON, "x86_64"
        )
    wheelset.check_interpreter(spec("https://x"), PYTHON, "x86_64")


def report_item(name, version, url, sha256=SHA):
    return {
        "metadata": {"name": name, "version": version},
        "download_info": {"url": url, "archive_info": {"hashes": {"sha256": sha256}}},
    }


def test_report_files_from_elsewhere_than_the_index_are_refused():
    pypi = spec("https://pypi.org/simple")
    local = {
        "install": [
            report_item("torchlike", "1.0", "file:///opt/wheels/torchlike-1.0-py3-none-any.whl")
        ]
    }
    with pytest.raises(wheelset.ResolveError, match="pip took it from a local source"):
        wheelset.parse_report(pypi, local)
    unhashed = {"install": [report_item("a", "1", "https://f/a-1-py3-none-any.whl", sha256="")]}
    with pytest.raises(wheelset.ResolveError, match="the index gave no sha256"):
        wheelset.parse_report(pypi, unhashed)
    sdist = {"install": [report_item("a", "1", "https://f/a-1.tar.gz")]}
    with pytest.raises(wheelset.ResolveError, match="is not a wheel"):
        wheelset.parse_report(pypi, sdist)
    # An exclusion the resolution does not contain is a stale lock entry.
    plain = {"install": [report_item("a", "1", "https://f/a-1-py3-none-any.whl")]}
    with pytest.raises(wheelset.ResolveError, match="names nccl-like, which the resolution"):
        wheelset.parse_report(pypi, plain)


def make_wheel(directory, project, version, tag="py3-none-any", requires=()):
    dist = project.replace("-", "_")
    path = directory / f"{dist}-{version}-{tag}.whl"
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {project}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{dist}/__init__.py", "")
        archive.writestr(f"{info}/METADATA", metadata)
        archive.writestr(
            f"{info}/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {tag}\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def index(tmp_path):
    """A file:// PEP 503 index: what pip's resolver must and must not pick from it."""
    files = tmp_path / "files"
    files.mkdir()
    requires = [
        "dep-a>=2",
        "nccl-like==2.0; platform_machine == 'x86_64'",
        "old-only; python_version < '3'",
    ]
    wheels = [
        make_wheel(files, "torchlike", "1.0", f"{CP}-{CP}-manylinux1_x86_64", requires),
        # Another Python's and too new a glibc's builds of the same release.
        make_wheel(files, "torchlike", "1.0", f"{OTHER_CP}-{OTHER_CP}-manylinux1_x86_64", requires),
        make_wheel(files, "dep-a", "2.0"),
        make_wheel(files, "dep-a", "3.0", f"{CP}-{CP}-manylinux_2_34_x86_64"),
        make_wheel(files, "nccl-like", "2.0", "py3-none-manylinux2014_x86_64"),
        make_wheel(files, "old-only", "1.0"),
    ]
    for project in {path.name.split("-")[0].replace("_", "-") for path in wheels}:
        page = tmp_path / "simple" / project
        page.mkdir(parents=True)
        links = [
            f'<a href="{path.as_uri()}#sha256={hashlib.sha256(path.read_bytes()).hexdigest()}">'
            f"{path.name}</a>"
            for path in wheels
            if path.name.split("-")[0].replace("_", "-") == project
        ]
        (page / "index.html").write_text("<html><body>" + "".join(links) + "</body></html>")
    return (tmp_path / "simple").as_uri()


def test_pip_resolves_the_closure_for_the_target_and_leaves_out_the_excluded(index):
    resolution = wheelset.resolve(spec(index))
    assert [w["filename"] for w in resolution.wheels] == [
        "dep_a-2.0-py3-none-any.whl",
        f"torchlike-1.0-{CP}-{CP}-manylinux1_x86_64.whl",
    ]
    assert resolution.excluded == {"nccl-like": "2.0"}
    for wheel in resolution.wheels:
        path = Path(wheel["urls"][0].removeprefix("file://"))
        assert wheel["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_pip_configuration_adds_no_other_source(index, tmp_path, monkeypatch):
    """pip.conf's find-links (as on this controller) must not feed the resolution."""
    local = tmp_path / "local-wheels"
    local.mkdir()
    make_wheel(local, "dep-a", "9.0")
    config = tmp_path / "pip.conf"
    config.write_text(f"[global]\nfind-links = {local}\n")
    monkeypatch.setenv("PIP_FIND_LINKS", str(local))
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    versions = [w["filename"] for w in wheelset.resolve(spec(index)).wheels]
    assert "dep_a-2.0-py3-none-any.whl" in versions


def write_set_lock(tmp_path, index):
    path = tmp_path / "versions.yml"
    path.write_text(
        textwrap.dedent(f"""\
        ---
        efa_image_artifacts:
          torchset:
            description: a requirement with its closure
            kind: wheelset
            version: "1.0"
            role: pytorch
            methods: [wheel]
            # kept
            resolve:
              requirements: ["torchlike=={{version}}"]
              python: "{PYTHON}"
              platform: manylinux_2_28_x86_64
              index: {index}
              exclude: [nccl-like]
            wheels: []
            excluded: {{}}
        """)
    )
    return path


def test_lock_update_resolves_pins_fetches_and_mirrors_the_set(index, tmp_path, capsys):
    path = write_set_lock(tmp_path, index)
    cache = str(tmp_path / "cache")
    assert cli.main(["lock", "update", "torchset", "--lock", str(path), "--cache", cache]) == 0
    out = capsys.readouterr().out
    assert "torchset 1.0: 2 wheels resolved, fetched and verified, changed" in out
    assert '+      - filename: "dep_a-2.0-py3-none-any.whl"' in out and "# kept" in path.read_text()
    loaded = lock.load(path)
    assert {a.name for a in loaded.artifacts.values()} == {"torchset/dep-a", "torchset/torchlike"}
    assert yaml.safe_load(path.read_text())[lock.LOCK_KEY]["torchset"]["excluded"] == {
        "nccl-like": "2.0"
    }
    # Already resolved: nothing changes.
    assert cli.main(["lock", "update", "torchset", "--lock", str(path), "--cache", cache]) == 0
    assert "already pinned" in capsys.readouterr().out
    # A file of the set is pinned with the set, not alone.
    member_update = ["lock", "update", "torchset/dep-a", "--lock", str(path), "--cache", cache]
    assert cli.main(member_update) == 1
    assert "run `efa-image lock update torchset`" in capsys.readouterr().err
    # The cache holds every file by content; a mirror of the set is built from it alone.
    mirror = tmp_path / "mirror"
    args = ["mirror", "create", str(mirror), "--name", "torchset", "--lock", str(path)]
    assert cli.main([*args, "--cache", cache]) == 0
    index_json = json.loads((mirror / "index.json").read_text())
    assert sorted(e["path"] for e in index_json) == [
        "torchset/dep-a/2.0/dep_a-2.0-py3-none-any.whl",
        f"torchset/torchlike/1.0/torchlike-1.0-{CP}-{CP}-manylinux1_x86_64.whl",
    ]
    # A tampered copy in the mirror is refused by sha256, like any artifact.
    tampered = mirror / index_json[0]["path"]
    tampered.write_bytes(b"tampered")
    fetch = ["fetch", "--name", "torchset", "--lock", str(path), "--mirror", str(mirror)]
    assert cli.main([*fetch, "--cache", str(tmp_path / "empty-cache")]) == 1
    assert "does not match the lock's" in capsys.readouterr().err


def test_project_lock_pins_pytorch_without_its_nccl(root):
    loaded = lock.load(root / "playbooks/group_vars/all/versions.yml")
    members = loaded.select(["pytorch"])
    names = {m.name for m in members}
    assert "pytorch/torch" in names and "pytorch/triton" in names
    assert not [n for n in names if "nccl" in n]
    assert loaded.get("pytorch/torch").version == "2.5.1"
    for wheel in members:
        assert wheel.kind == "wheel" and wheel.methods == ("wheel",)
        assert all(url.startswith("https://files.pythonhosted.org/") for url in wheel.urls)
        python_tag = wheel.filename.split("-")[-3]
        assert python_tag in ("cp311", "py3"), wheel.filename
    entry = yaml.safe_load((root / "playbooks/group_vars/all/versions.yml").read_text())
    assert entry[lock.LOCK_KEY]["pytorch"]["excluded"] == {"nvidia-nccl-cu12": "2.21.5"}


def test_the_artifact_role_resolves_a_set_into_one_item_per_file(tmp_path):
    """tasks_from resolve with a set's name: artifact_info keyed <set>/<project>."""
    lock_file(tmp_path).write_text(yaml.safe_dump({lock.LOCK_KEY: {"torchset": set_entry()}}))
    (tmp_path / "play.yml").write_text(
        textwrap.dedent("""\
        - name: Resolve a wheel set
          hosts: localhost
          connection: local
          gather_facts: false
          tasks:
            - name: Resolve
              ansible.builtin.include_role:
                name: artifact
                tasks_from: resolve
              vars:
                artifact_names: [torchset]
            - name: Show
              ansible.builtin.debug:
                msg: "RESOLVED {{ artifact_info.keys() | sort | join(',') }}"
        """)
    )
    proc = run_playbook(tmp_path / "play.yml")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "RESOLVED torchset/dep-a,torchset/torchlike" in proc.stdout


def test_every_file_of_a_set_is_verified_before_use(tmp_path):
    """The cache refuses a member whose bytes are not the lock's, as for any artifact."""
    member_artifact = parse({"torchset": set_entry()})["torchset/dep-a"]
    store = artifact_store.Store(cache_dir=tmp_path / "cache")
    cached = store.cached_path(member_artifact)
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"not the wheel")
    with pytest.raises(artifact_store.ChecksumMismatch, match=r"torchset/dep-a 2\.0"):
        store.get(member_artifact)
    assert list((tmp_path / "cache" / "quarantine").iterdir())


def test_a_sets_sdists_become_sdist_artifacts_of_the_set():
    entry = set_entry(sdists=[member("tool_kit-5.1.tar.gz", sha256="c" * 64)])
    parsed = parse({"torchset": entry})
    tool = parsed["torchset/tool-kit"]
    assert (tool.kind, tool.version, tool.wheelset) == ("sdist", "5.1", "torchset")
    assert parsed["torchset/dep-a"].kind == "wheel"
    with pytest.raises(
        lock.LockError, match=r"\.sdists\[0\]: 'x-1-py3-none-any.whl' is not a source"
    ):
        parse({"torchset": set_entry(sdists=[member("x-1-py3-none-any.whl")])})
    twice = set_entry(sdists=[member("dep_a-2.0.tar.gz")])
    with pytest.raises(lock.LockError, match=r"\.sdists\[0\]: dep-a is listed twice"):
        parse({"torchset": twice})


def test_sdists_resolve_first_and_their_requirements_join_the_binaries(monkeypatch):
    """pip refuses sdists with a foreign --platform unless --no-deps: the sdists are
    resolved alone, then what they require (markers evaluated, extras dropped, sdists
    of resolve.sdists again) is resolved as binary wheels with the rest."""
    sources = {
        "tool-kit": (
            "5.1",
            ["dep-a>=2", "small-src==1.2", "old; python_version < '3'", "x; extra == 't'"],
        ),
        "small-src": ("1.2", ["dep-b"]),
    }
    calls = []

    def fake_pip(argv, env=None):
        report = Path(argv[argv.index("--report") + 1])
        wanted = argv[argv.index("--index-url") + 2 :]
        source = "--no-binary" in argv
        calls.append((source, wanted))
        install = []
        for requirement in wanted:
            project = wheelset.project_of(requirement, "test")
            if source:
                version, requires = sources[project]
                url = f"https://f/{project.replace('-', '_')}-{version}.tar.gz"
                item = report_item(project, version, url)
                item["metadata"]["requires_dist"] = requires
            else:
                item = report_item(
                    project, "2.0", f"https://f/{project.replace('-', '_')}-2.0-py3-none-any.whl"
                )
            install.append(item)
        report.write_text(json.dumps({"install": install}))

    monkeypatch.setattr(wheelset, "run_command", fake_pip)
    wanted = spec(
        "https://pypi.org/simple",
        requirements=("tool-kit==5.1", "dep-c"),
        exclude=(),
        sdists=("tool-kit", "small-src"),
    )
    resolution = wheelset.resolve(wanted)
    assert calls == [
        (True, ["tool-kit==5.1"]),
        (True, ["small-src==1.2"]),
        (False, ["dep-c", "dep-a>=2", "dep-b"]),
    ]
    assert [s["filename"] for s in resolution.sdists] == [
        "small_src-1.2.tar.gz",
        "tool_kit-5.1.tar.gz",
    ]
    assert [w["filename"] for w in resolution.wheels] == [
        "dep_a-2.0-py3-none-any.whl",
        "dep_b-2.0-py3-none-any.whl",
        "dep_c-2.0-py3-none-any.whl",
    ]


def test_a_wheel_where_an_sdist_is_asked_for_is_refused():
    wanted = spec("https://pypi.org/simple", exclude=(), sdists=("a",))
    wheel = {"install": [report_item("a", "1", "https://f/a-1-py3-none-any.whl")]}
    with pytest.raises(wheelset.ResolveError, match="is not a source distribution"):
        wheelset.parse_report(wanted, wheel)
    sdist = {"install": [report_item("b", "1", "https://f/b-1.tar.gz")]}
    with pytest.raises(wheelset.ResolveError, match=r"name the project in resolve\.sdists"):
        wheelset.parse_report(wanted, sdist)


def test_project_lock_builds_the_training_toolkit_and_mpi4py_from_sdists(root):
    entries = lock.load(root / "playbooks/group_vars/all/versions.yml").artifacts
    members = {a.name: a for a in entries.values() if a.wheelset == "sagemaker_training"}
    sdists = {name for name, a in members.items() if a.kind == "sdist"}
    assert sdists == {
        "sagemaker_training/sagemaker-training",
        "sagemaker_training/mpi4py",
        "sagemaker_training/inotify-simple",
    }
    # The toolkit's master/worker handshake, and what the sdists' builds need.
    for project in ("paramiko", "setuptools", "wheel", "psutil"):
        assert members[f"sagemaker_training/{project}"].kind == "wheel"
