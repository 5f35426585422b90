"""The project's import graph, read statically with ``ast``, and its cycles (issue 40).

``graph(root)`` maps each module of a source tree to the project modules it imports: every
``import`` counts (function-local and ``TYPE_CHECKING`` ones included: a cycle that only typing
closes is still two rooms that need each other). ``from pkg import name`` is an edge to
``pkg.name`` when that is a module, else to ``pkg``. The implicit import of a package's
``__init__`` by its submodules is not an edge (every package would be a cycle with its children).
``cycles(graph)`` gives the strongly connected components of more than one module (Tarjan), and
of one module that imports itself.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

Graph = Mapping[str, frozenset[str]]


def module_name(path: Path, src: Path) -> str:
    """The dotted name of the module at ``path`` under the source root ``src``."""
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def graph(src: Path, package: str) -> dict[str, frozenset[str]]:
    """Each module of ``package`` (dotted, found under ``src``) to the modules of ``package`` it
    imports (imports of modules outside it are left out)."""
    folder = src.joinpath(*package.split("."))
    modules = {module_name(path, src): path for path in sorted(folder.rglob("*.py"))}
    edges: dict[str, frozenset[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        is_package = path.name == "__init__.py"
        targets = {
            target
            for node in ast.walk(tree)
            for target in _targets(node, name, is_package, modules)
            if target in modules and target != name
        }
        edges[name] = frozenset(targets)
    return edges


def _targets(
    node: ast.AST, importer: str, is_package: bool, modules: Mapping[str, Path]
) -> Iterable[str]:
    if isinstance(node, ast.Import):
        return [_known(alias.name, modules) for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        here = importer.split(".") if is_package else importer.split(".")[:-1]
        base = here[: len(here) - (node.level - 1)]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    named = [f"{module}.{alias.name}" for alias in node.names]
    submodules = [name for name in named if name in modules]
    return submodules if len(submodules) == len(named) else [*submodules, _known(module, modules)]


def _known(dotted: str, modules: Mapping[str, Path]) -> str:
    """The longest prefix of ``dotted`` that is a module (``import a.b.c`` of a package)."""
    parts = dotted.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()
    return ".".join(parts)


def cycles(edges: Graph) -> list[list[str]]:
    """The import cycles of ``edges``: its strongly connected components of two or more modules
    (each sorted), found with Tarjan's algorithm, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(edges.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, pending = work[-1]
            if pending:
                child = pending.pop()
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, sorted(edges.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def within(edges: Graph, prefix: str) -> dict[str, frozenset[str]]:
    """The subgraph of the modules in ``prefix`` (a dotted package), edges between them only."""
    inside = {m for m in edges if m == prefix or m.startswith(prefix + ".")}
    return {m: frozenset(t for t in edges[m] if t in inside) for m in inside}
