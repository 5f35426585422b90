"""Names that explain themselves (issue 28): no two public classes in src/ share a name.

Read from the source with ``ast``: every class statement whose name has no leading underscore, at
module level or inside another class (what an import can reach; a class local to a function is
not). Two classes of one name in different modules (``ChangeSet`` for a captured
transaction and for an operator journal record, say) make an import, a traceback and a search
ambiguous; each is named for what it holds.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "invalidation_contracts"


def public_classes() -> dict[str, list[str]]:
    """Each public class name with the modules (paths below the package) that define it."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(SRC.rglob("*.py")):
        module = path.relative_to(SRC).as_posix()
        for name in _classes(ast.parse(path.read_text(encoding="utf-8"))):
            found[name].append(module)
    return found


def _classes(node: ast.AST) -> list[str]:
    """The public classes an import reaches below ``node`` (function bodies are skipped)."""
    names: list[str] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(child, ast.ClassDef) and not child.name.startswith("_"):
            names.append(child.name)
        names.extend(_classes(child))
    return names


def test_the_reader_sees_the_public_classes():
    classes = public_classes()
    assert classes["FixMemory"] == ["client/memory.py"]
    assert "_Surface" not in classes and len(classes) > 300
    assert "Relaying" not in classes  # local to a function: no import reaches it


def test_no_two_public_classes_share_a_name():
    shared = {name: paths for name, paths in public_classes().items() if len(paths) > 1}
    assert shared == {}
