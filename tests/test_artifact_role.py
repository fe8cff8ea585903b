"""The artifact role stops a play before the target changes when a file is bad.

Runs ansible-playbook against localhost (connection local) with a mirror
directory holding a tampered file: a generic fixture, not an upstream source.
"""

import hashlib
import json
import subprocess
import textwrap
from pathlib import Path

import yaml

from localplay import localhost_play, lock_file, run_playbook

GOOD = b"the real archive\n"


def play(tmp_path, mirror_content: bytes, digest: str = "sha256"):
    mirror = tmp_path / "mirror" / "libfabric" / "2.1.0"
    mirror.mkdir(parents=True)
    (mirror / "libfabric-2.1.0.tar.bz2").write_bytes(mirror_content)
    lock_file(tmp_path).write_text(
        textwrap.dedent(f"""\
        efa_image_artifacts:
          libfabric:
            version: "2.1.0"
            role: efa
            filename: libfabric-{{version}}.tar.bz2
            urls: ["https://unreachable.invalid/libfabric-{{version}}.tar.bz2"]
            {digest}: "{hashlib.new(digest, GOOD).hexdigest()}"
        """)
    )
    dest = tmp_path / "target"
    (tmp_path / "play.yml").write_text(
        textwrap.dedent(f"""\
        - name: Place an artifact
          hosts: localhost
          connection: local
          gather_facts: false
          vars:
            ansible_python_interpreter: "{{{{ ansible_playbook_python }}}}"
          roles:
            - role: artifact
              vars:
                artifact_names: [libfabric]
                artifact_dest: {dest}
                artifact_mirror: {tmp_path / "mirror"}
                artifact_cache_dir: {tmp_path / "cache"}
        """)
    )
    proc = run_playbook(tmp_path / "play.yml")
    return proc, dest


def test_good_file_reaches_the_target(tmp_path):
    proc, dest = play(tmp_path, GOOD)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (dest / "libfabric-2.1.0.tar.bz2").read_bytes() == GOOD


def test_tampered_mirror_file_stops_before_the_target_changes(tmp_path):
    proc, dest = play(tmp_path, b"tampered\n")
    assert proc.returncode != 0
    output = " ".join(proc.stdout.split())
    assert "libfabric 2.1.0 (libfabric-2.1.0.tar.bz2)" in output
    assert hashlib.sha256(b"tampered\n").hexdigest() in output
    assert hashlib.sha256(GOOD).hexdigest() in output
    assert not dest.exists()
    assert len(list((tmp_path / "cache" / "quarantine").iterdir())) == 1


def test_sha512_pinned_file_is_verified_by_sha512_on_both_sides(tmp_path):
    proc, dest = play(tmp_path, GOOD, digest="sha512")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert (dest / "libfabric-2.1.0.tar.bz2").read_bytes() == GOOD
    assert (tmp_path / "cache" / "sha512" / hashlib.sha512(GOOD).hexdigest()).is_file()
    proc, dest = play(tmp_path / "bad", b"tampered\n", digest="sha512")
    assert proc.returncode != 0
    output = " ".join(proc.stdout.split())
    tampered = hashlib.sha512(b"tampered\n").hexdigest()
    assert f"sha512 {tampered} does not match" in output
    assert not dest.exists()


LINK_SCRIPT = Path(__file__).resolve().parents[1] / "roles/artifact/files/link-from-mount.sh"


def link_from_mount(*pairs: Path) -> list[str]:
    argv = ["sh", "-c", LINK_SCRIPT.read_text(), "link-from-mount", *map(str, pairs)]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.splitlines()


def test_wheels_are_linked_from_the_mounted_cache_once_and_missing_ones_named(tmp_path):
    """The generic mechanics of the link step: a file in a directory standing for the
    mounted cache, and one the mount lacks (the role copies that one)."""
    mount, wheelhouse = tmp_path / "mount", tmp_path / "wheelhouse"
    mount.mkdir()
    wheelhouse.mkdir()
    (mount / "abc").write_bytes(GOOD)
    pairs = [mount / "abc", wheelhouse / "a.whl", mount / "def", wheelhouse / "b.whl"]
    assert link_from_mount(*pairs) == [f"linked {wheelhouse}/a.whl", f"missing {wheelhouse}/b.whl"]
    assert (wheelhouse / "a.whl").read_bytes() == GOOD
    assert not (wheelhouse / "b.whl").exists()
    assert link_from_mount(*pairs) == [f"missing {wheelhouse}/b.whl"], "an existing link is kept"


def resolve(name: str) -> dict:
    """A task that includes the artifact role's resolve entry point for one entry."""
    return {
        "name": f"Resolve {name}",
        "ansible.builtin.include_role": {"name": "artifact", "tasks_from": "resolve"},
        "vars": {"artifact_names": [name], "artifact_fetch": False},
    }


def test_resolve_without_the_lock_names_the_file_to_load(tmp_path):
    """The resolve entry point, in a play that has no lock: one task, which says
    where the lock comes from (and nothing resolved)."""
    proc = run_playbook(localhost_play(tmp_path, "Resolve without a lock", [resolve("libfabric")]))
    assert proc.returncode != 0
    output = " ".join(proc.stdout.split())
    assert "TASK [artifact : Resolve lock entries]" in output
    assert "efa_image_artifacts is not defined: run from playbooks/" in output


def test_resolve_publishes_each_entry_by_name(tmp_path):
    entries = {
        "libfabric": ("2.1.0", "efa", "libfabric-{version}.tar.bz2"),
        "metis": ("5.1.0", "metis", "metis-{version}.tar.gz"),
    }
    lock = {
        name: {
            "version": version,
            "role": role,
            "filename": filename,
            "urls": [f"https://unreachable.invalid/{filename}"],
            "sha256": hashlib.sha256(name.encode()).hexdigest(),
        }
        for name, (version, role, filename) in entries.items()
    }
    lock_file(tmp_path).write_text(yaml.safe_dump({"efa_image_artifacts": lock}))
    info = tmp_path / "info.json"
    write = {
        "name": "Write what was published",
        "ansible.builtin.copy": {
            "content": "{{ artifact_info | to_json }}",
            "dest": str(info),
            "mode": "0644",
        },
    }
    tasks = [resolve("libfabric"), resolve("metis"), write]
    proc = run_playbook(localhost_play(tmp_path, "Resolve two entries", tasks))
    assert proc.returncode == 0, proc.stdout[-3000:]
    published = json.loads(info.read_text())
    assert sorted(published) == ["libfabric", "metis"]
    assert published["libfabric"]["version"] == "2.1.0"
    assert published["metis"]["filename"] == "metis-5.1.0.tar.gz"
    assert "path" not in published["metis"]
