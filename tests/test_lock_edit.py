"""Editing the lock's file (`efa-image lock update`): one field changes, the rest stays."""

import textwrap

import pytest
import yaml

from efa_image.artifacts import lock, lock_edit

GOOD_SHA = "a" * 64

LOCK_TEXT = """\
---
# top comment
efa_image_artifacts:
  first:
    version: "1"
    wheels: keep
  torchset:
    kind: wheelset
    version: "1.0"
    resolve:
      # nested fields of the same name are not the entry's
      wheels: nested
    wheels:
      - filename: old-1-py3-none-any.whl
        urls:
          - "https://x/old"
        sha256: "old"
    # comment kept between fields
    excluded: {}

  last:
    sha256: ""
"""


def member(filename):
    return {"filename": filename, "urls": ["https://files.example/x.whl"], "sha256": GOOD_SHA}


def test_set_field_rewrites_one_field_and_keeps_comments_order_and_layout():
    new = lock_edit.set_field(LOCK_TEXT, "torchset", "wheels", [member("a-1-py3-none-any.whl")])
    new = lock_edit.set_field(new, "torchset", "excluded", {"nccl-like": "2.0"})
    # Byte for byte: every comment where it was (the one after the replaced list
    # included), keys in their order, the blank line between entries, and the new
    # values in the lock's style (strings double-quoted, block lists dashed in by 2).
    assert new == LOCK_TEXT.replace(
        """\
      - filename: old-1-py3-none-any.whl
        urls:
          - "https://x/old"
        sha256: "old"
""",
        f"""\
      - filename: "a-1-py3-none-any.whl"
        urls:
          - "https://files.example/x.whl"
        sha256: "{GOOD_SHA}"
""",
    ).replace("    excluded: {}\n", '    excluded:\n      nccl-like: "2.0"\n')
    # Emptied again: the comment that followed the list follows `[]`.
    emptied = lock_edit.set_field(new, "torchset", "wheels", [])
    emptied = lock_edit.set_field(emptied, "torchset", "excluded", {})
    assert (
        "    wheels: []\n    # comment kept between fields\n    excluded: {}\n\n  last:" in emptied
    )


def test_missing_entries_and_fields_are_named_with_the_fix():
    with pytest.raises(
        lock.LockError, match=r"no `excluded:` field to update \(add `excluded: \{\}`\)"
    ):
        lock_edit.set_field(LOCK_TEXT, "first", "excluded", {})
    with pytest.raises(
        lock.LockError, match=r"no `wheels:` field to update \(add `wheels: \[\]`\)"
    ):
        lock_edit.set_field(LOCK_TEXT, "last", "wheels", [])
    with pytest.raises(lock.LockError, match=r'no `sha256:` line to update \(add `sha256: ""`\)'):
        lock_edit.set_sha256(LOCK_TEXT, "first", "c" * 64)
    with pytest.raises(lock.LockError, match=r"efa_image_artifacts.metis: no such entry"):
        lock_edit.set_sha256(LOCK_TEXT, "metis", "c" * 64)
    with pytest.raises(lock.LockError, match=r"versions.yml: not valid YAML"):
        lock_edit.LockDocument("efa_image_artifacts: [unclosed\n", "versions.yml")
    with pytest.raises(lock.LockError, match=r"versions.yml: expected a mapping at the top"):
        lock_edit.LockDocument("- efa_image_artifacts\n", "versions.yml")


def test_set_sha256_rewrites_only_that_entrys_own_field():
    """Not a nested field of the same name, a list item's, another top-level key's entry
    of the same name, nor an entry whose name starts with the same letters."""
    text = textwrap.dedent(f"""\
        ---
        other:
          openmpi:
            sha256: not-the-lock
        efa_image_artifacts:  # the lock
          openmpi_x:
            sha256: "prefix of a name"
          libfabric:
            version: "2.1.0"
            sha256: "{GOOD_SHA}"  # old
          openmpi:  # an entry with a comment
            resolve:
              sha256: nested
            wheels:
              - filename: a.whl
                sha256: in-a-list-item
            # a comment before the field

            sha256: ""
        """)
    updated = lock_edit.set_sha256(text, "openmpi", "c" * 64)
    assert updated == text.replace('    sha256: ""\n', f'    sha256: "{"c" * 64}"\n')
    pinned = lock_edit.set_sha256(text, "libfabric", "b" * 64)
    assert pinned == text.replace(GOOD_SHA, "b" * 64)


def lock_files(root):
    return [
        root / "playbooks/group_vars/all/versions.yml",
        *sorted((root / "playbooks/lock-overlays").glob("*.yml")),
    ]


def test_the_projects_lock_and_overlays_come_back_byte_for_byte(root):
    for path in lock_files(root):
        text = path.read_text()
        assert lock_edit.LockDocument(text, str(path)).text() == text, path


def test_rewriting_every_field_lock_update_writes_with_its_value_changes_nothing(root):
    """What `lock update` writes, written again unchanged, is the lock as it is: the
    style of the written values is the lock's."""
    path = root / "playbooks/group_vars/all/versions.yml"
    text = path.read_text()
    document = lock_edit.LockDocument(text, str(path))
    fields = 0
    for name, entry in yaml.safe_load(text)[lock.LOCK_KEY].items():
        for key in ("sha256", "wheels", "excluded", "sdists"):
            if key in entry:
                document.set_field(name, key, entry[key])
                fields += 1
    assert fields > 20
    assert document.text() == text


def test_unified_diff_shows_the_edit_and_nothing_for_none(tmp_path):
    path = tmp_path / "versions.yml"
    new = lock_edit.set_sha256(LOCK_TEXT, "last", "c" * 64)
    diff = lock_edit.unified_diff(LOCK_TEXT, new, path)
    assert f'-    sha256: ""\n+    sha256: "{"c" * 64}"\n' in diff
    assert diff.startswith(f"--- {path}\n+++ {path}\n")
    assert lock_edit.unified_diff(LOCK_TEXT, LOCK_TEXT, path) == ""
