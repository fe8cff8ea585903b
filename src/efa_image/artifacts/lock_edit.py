"""Rewrite fields of the lock's entries in its file, keeping the rest as written.

`efa-image lock update` writes a sha256 (efa_image.artifacts.pin) or a wheel
set's resolution (efa_image.artifacts.wheelset) into
playbooks/group_vars/all/versions.yml, a file people write and comment. It is
edited through ruamel.yaml's round trip, which keeps comments, key order,
quoting and flow lists; the emitter is set to the lock's layout (mappings by 2,
list items dashed 2 in under their key, no folding of long URLs), so a file in
that layout comes back byte for byte and a diff shows only the edit. What is
written takes the lock's style: strings double-quoted, lists and mappings in
block style.
"""

from __future__ import annotations

import difflib
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedBase, CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError
from ruamel.yaml.scalarstring import DoubleQuotedScalarString

from efa_image.artifacts.lock_model import LOCK_KEY, LockError

# The longest line the emitter writes before folding: never, as in the lock.
NO_FOLDING = 1 << 16


class LockDocument:
    """A lock (or overlay) file's YAML, to edit and write back."""

    def __init__(self, text: str, where: str = "the lock") -> None:
        self._yaml = YAML()
        self._yaml.preserve_quotes = True
        self._yaml.indent(mapping=2, sequence=4, offset=2)
        self._yaml.width = NO_FOLDING
        self._yaml.explicit_start = text.startswith("---")
        try:
            self.data = self._yaml.load(text)
        except YAMLError as exc:
            raise LockError(f"{where}: not valid YAML: {exc}") from exc
        if not isinstance(self.data, CommentedMap):
            raise LockError(f"{where}: expected a mapping at the top")

    def text(self) -> str:
        out = io.StringIO()
        self._yaml.dump(self.data, out)
        return out.getvalue()

    def set_field(self, name: str, key: str, value: Any) -> None:
        """Replace one field of the entry `name` (a scalar, list or mapping, with whatever
        it nests); the comments around it stay where they were."""
        entries = self.data.get(LOCK_KEY)
        entry = entries.get(name) if isinstance(entries, CommentedMap) else None
        if not isinstance(entry, CommentedMap):
            raise LockError(f"{LOCK_KEY}.{name}: no such entry to update")
        if key not in entry:
            if isinstance(value, Mapping | list):
                empty = "{}" if isinstance(value, Mapping) else "[]"
                raise LockError(
                    f"{LOCK_KEY}.{name}: no `{key}:` field to update (add `{key}: {empty}`)"
                )
            raise LockError(f'{LOCK_KEY}.{name}: no `{key}:` line to update (add `{key}: ""`)')
        trailing = _take_trailing(entry, key)
        entry[key] = _node(value)
        if trailing is not None:
            _put_trailing(entry, key, trailing)


def set_field(text: str, name: str, key: str, value: Any) -> str:
    """The lock's text with one field of one entry replaced, everything else kept."""
    document = LockDocument(text)
    document.set_field(name, key, value)
    return document.text()


def set_sha256(text: str, name: str, sha256: str) -> str:
    """The lock's text with the entry's sha256 replaced, comments and layout kept."""
    return set_field(text, name, "sha256", sha256)


def unified_diff(old: str, new: str, path: Path) -> str:
    """What an edit changed in the lock at path, as `lock update` shows it ("" for nothing)."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), str(path), str(path)
    )
    return "".join(lines)


def _node(value: Any) -> Any:
    """value as the lock writes it: strings double-quoted (a sha256 of digits stays a
    string), collections in block style."""
    if isinstance(value, Mapping):
        mapping = CommentedMap()
        for key, item in value.items():
            mapping[str(key)] = _node(item)
        return mapping
    if isinstance(value, list | tuple):
        return CommentedSeq(_node(item) for item in value)
    if isinstance(value, str):
        return DoubleQuotedScalarString(value)
    return value


# The comment after a value (end-of-line comment, then the blank lines and comment
# lines up to the next key) is held by the last scalar the value nests: ruamel keeps
# it in that scalar's parent, slot 2 of a mapping's key, slot 0 of a list's index.
# Replacing a nested value would drop it with the old nodes, so it is moved over.


def _trailing_slot(parent: CommentedBase, key: Any) -> tuple[list[Any], int]:
    value = parent[key]
    if isinstance(value, CommentedMap | CommentedSeq) and value and not value.fa.flow_style():
        last = next(reversed(value)) if isinstance(value, CommentedMap) else len(value) - 1
        return _trailing_slot(value, last)
    slots = parent.ca.items.setdefault(key, [None, None, None, None])
    return slots, 2 if isinstance(parent, CommentedMap) else 0


def _take_trailing(parent: CommentedBase, key: Any) -> Any:
    slots, index = _trailing_slot(parent, key)
    comment, slots[index] = slots[index], None
    return comment


def _put_trailing(parent: CommentedBase, key: Any, comment: Any) -> None:
    slots, index = _trailing_slot(parent, key)
    slots[index] = comment
