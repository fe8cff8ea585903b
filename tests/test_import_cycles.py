"""No module of efa_image imports, directly or through others, a module that imports it.

Every import counts: at module level, inside functions and under TYPE_CHECKING
(a function-level import that dodges a cycle at run time is still the cycle).
Shared dataclasses go to efa_image.types instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def module_name(src: Path, path: Path) -> str:
    parts = path.relative_to(src).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(tree: ast.AST, package: str, known: set[str]) -> set[str]:
    """The efa_image modules that a module's imports name (a package's submodule when
    `from package import name` names one, else the package)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in known:
                    found.add(target)
                elif base in known:
                    found.add(base)
    return found


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    paths = {module_name(src, path): path for path in (src / "efa_image").rglob("*.py")}
    known = set(paths)
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = imported(ast.parse(path.read_text()), package, known) - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each cycle once, as the path from its smallest module back to it."""
    found: dict[tuple[str, ...], list[str]] = {}

    def walk(path: list[str]) -> None:
        for target in sorted(graph.get(path[-1], ())):
            if target == path[0]:
                found.setdefault(tuple(sorted(path)), [*path, target])
            elif target not in path and target > path[0]:
                walk([*path, target])

    for start in sorted(graph):
        walk([start])
    return list(found.values())


def test_efa_image_has_no_import_cycle():
    graph = import_graph()
    assert "efa_image.types" in graph and "efa_image.cli" in graph
    assert cycles(graph) == []


def test_the_check_sees_cycles_through_function_level_and_type_checking_imports(tmp_path):
    package = tmp_path / "efa_image"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from efa_image.sub.b import X\n"
    )
    (package / "sub" / "b.py").write_text("def f():\n    from . import c\n")
    (package / "sub" / "c.py").write_text("from efa_image.sub import a\n")
    assert cycles(import_graph(tmp_path)) == [
        ["efa_image.sub.a", "efa_image.sub.b", "efa_image.sub.c", "efa_image.sub.a"]
    ]
