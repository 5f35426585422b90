"""The capture core (``server/capture``) is sans-IO: nothing it imports, followed through the
project's own modules (any import, function-local and ``TYPE_CHECKING`` ones included), reaches a
SQL, HTTP or store edge or a library only an edge may use."""

from __future__ import annotations

from tests.test_layering import EDGE_LIBRARIES, ROOT, SERVER_EDGES, Import, imports

CORE = "server.capture"


def _reached() -> dict[str, Import]:
    """Every module the core reaches (dotted, absolute), with the import that first reached it."""
    by_importer: dict[str, list[Import]] = {}
    for found in imports():
        name = found.path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        by_importer.setdefault(f"{ROOT}.{name}", []).append(found)
    start = [m for m in by_importer if m == f"{ROOT}.{CORE}" or m.startswith(f"{ROOT}.{CORE}.")]
    reached: dict[str, Import] = {}
    todo = list(start)
    while todo:
        for found in by_importer.get(todo.pop(), []):
            if found.module not in reached:
                reached[found.module] = found
                todo.append(found.module)
    return reached


def test_the_capture_core_reaches_no_server_edge():
    edges = [f"{ROOT}.{e}" for e in SERVER_EDGES]
    hits = [
        str(i) for m, i in _reached().items() if any(m == e or m.startswith(e + ".") for e in edges)
    ]
    assert hits == []


def test_the_capture_core_reaches_no_edge_library():
    hits = [
        str(i)
        for m, i in _reached().items()
        if any(m == lib or m.startswith(lib + ".") for lib in EDGE_LIBRARIES)
    ]
    assert hits == []


def test_the_walk_sees_the_cores_own_imports():
    reached = _reached()
    assert f"{ROOT}.server.registry" in reached
    assert f"{ROOT}.server.capture.records" in reached
