"""The layering of the library, read from the source with ``ast`` (issue 28).

Every ``import`` in src/ counts, function-local and ``TYPE_CHECKING`` ones included, except where a
rule says "at import time". A violation is reported as ``file:line imports module``. The tree
breaks none of these rules; a break that must stay a while is listed in ``EXCEPTIONS`` with its
reason, and an exception that no longer occurs fails the test too, so the list only shrinks.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.support.imports import cycles as import_cycles
from tests.support.imports import graph as import_graph

SRC = Path(__file__).parents[1] / "src"
ROOT = "invalidation_contracts"

#: Third-party libraries only an edge may import at import time.
EDGE_LIBRARIES = (
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "psycopg",
    "mcp",
    "httpx",
    "rich",
    "opentelemetry",
)
#: The client's edge: the store adapters (SQLite, PostgreSQL, and the in-memory one, loaded on
#: first use). (The operator's rich view is the command line's, ``cli.operator``; the httpx
#: integration is the ``httpx`` package beside the other integrations.)
CLIENT_EDGES = ("client.stores",)
#: The server's edge packages.
SERVER_EDGES = (
    "server.app",
    "server.http",
    "server.sql",
    "server.store",
    "server.worker.contract",
    "server.worker.follower",
    "server.worker.runtime",
    "server.worker.wakeups",
    "server.worker.watchdog",
)
#: The library: what an agent or a provider installs; the harness (bench, domains) is not in it.
LIBRARY = ("client", "server", "protocol", "mcp")
HARNESS = ("bench", "domains")
#: The integrations: adapters that feed the memory from a transport or an agent framework.
INTEGRATIONS = ("httpx", "mcp", "langchain", "pydantic_ai", "openai_agents", "llama_index", "adk")
#: The HTTP edges MCP must not depend on: it needs the worker and the need loop, never FastAPI
#: nor the httpx integration.
HTTP_EDGES = ("server.http", "cli.admin_client", "httpx")

#: Every edge of the project: what no core module may load at import time, however indirectly.
PROJECT_EDGES = (
    *CLIENT_EDGES,
    *SERVER_EDGES,
    *INTEGRATIONS,
    *HARNESS,
    "cli",
    "observe",
    "planners",
    "header_timeout",
    "sqlite_schema",
)
#: The cores: each package's modules outside its edges.
CORES = {"protocol": (), "client": CLIENT_EDGES, "server": SERVER_EDGES}
#: What the shared-store floor (``client.shared``) may import of the client: the memory's data,
#: never a room that decides what a fix means (admission, invalidation, strategies, ...).
SHARED_MAY_IMPORT = (
    "client.shared",
    "client.entries",
    "client.events",
    "client.lesson",
    "client.limits",
    "client.retention",
    "client.state",
    "client.stats",
)
#: Every package of the project: each one's own modules import one another without a cycle, and
#: so do the project's modules as a whole (issue 40 pins both at 0).
PACKAGES = tuple(sorted(p.parent.name for p in (SRC / ROOT).glob("*/__init__.py")))
#: Known breaks, each named for the issue that removes it: (importing file, imported module).
#: Empty since issue 28 moved the last edge and harness modules out of the library's core.
EXCEPTIONS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    path: str
    """The importing file, relative to src/invalidation_contracts."""
    line: int
    module: str
    """The imported module, absolute (``invalidation_contracts.…`` for the project's own)."""
    at_import_time: bool
    """A module-level import outside ``if TYPE_CHECKING``: it runs when the importer is imported."""

    def __str__(self) -> str:
        return f"{self.path}:{self.line} imports {self.module}"

    def within(self, *prefixes: str) -> bool:
        """Whether the importer is one of ``prefixes`` (dotted, below the package) or in one."""
        name = _module_of(self.path)
        return any(name == p or name.startswith(p + ".") for p in prefixes)

    def reaches(self, *prefixes: str, project: bool = True) -> bool:
        """Whether the imported module is one of ``prefixes`` or inside one of them."""
        full = tuple(f"{ROOT}.{p}" if project else p for p in prefixes)
        return any(self.module == p or self.module.startswith(p + ".") for p in full)


def _module_of(path: str) -> str:
    parts = list(Path(path).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(dotted: str) -> bool:
    base = SRC.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _resolve(node: ast.ImportFrom, path: Path) -> list[str]:
    """The modules ``from … import …`` names: a submodule when a name is one, else the package."""
    if node.level == 0:
        return [node.module or ""]
    package = list(path.relative_to(SRC).parent.parts)
    base = package[: len(package) - (node.level - 1)]
    module = ".".join(base + ([node.module] if node.module else []))
    submodules = [f"{module}.{a.name}" for a in node.names if _is_module(f"{module}.{a.name}")]
    return submodules or [module]


def _walk(node: ast.AST, path: Path, top: bool, out: list[Import]) -> None:
    for child in ast.iter_child_nodes(node):
        here = top and not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            for stmt in child.body:
                _walk(ast.Module(body=[stmt], type_ignores=[]), path, False, out)
            for stmt in child.orelse:
                _walk(ast.Module(body=[stmt], type_ignores=[]), path, top, out)
            continue
        rel = path.relative_to(SRC / ROOT).as_posix()
        if isinstance(child, ast.Import):
            out.extend(Import(rel, child.lineno, a.name, here) for a in child.names)
        elif isinstance(child, ast.ImportFrom):
            out.extend(Import(rel, child.lineno, m, here) for m in _resolve(child, path))
        else:
            _walk(child, path, here, out)


@functools.cache
def imports() -> tuple[Import, ...]:
    out: list[Import] = []
    for path in sorted((SRC / ROOT).rglob("*.py")):
        _walk(ast.parse(path.read_text(encoding="utf-8")), path, True, out)
    return tuple(out)


def broken(found: list[Import]) -> list[str]:
    """The violations not listed in ``EXCEPTIONS``."""
    return [str(i) for i in found if (i.path, i.module) not in EXCEPTIONS]


def test_the_parser_sees_function_local_and_relative_imports():
    # A rule that reads no imports passes vacuously: pin what the reader must find.
    found = {(i.path, i.module, i.at_import_time) for i in imports()}
    assert ("mcp/serve.py", f"{ROOT}.server.worker.contract", False) in found
    assert ("httpx/transport.py", "httpx", True) in found
    assert ("httpx/exchange.py", f"{ROOT}.client.needs", True) in found
    assert ("mcp/reads.py", f"{ROOT}.client.needs", True) in found
    assert len(found) > 1000


def test_protocol_imports_no_other_package_of_the_project():
    found = [
        i
        for i in imports()
        if i.within("protocol")
        and i.module.startswith(ROOT)
        # The optional-dependency guard (a module, not a package) every edge module uses.
        and not i.reaches("protocol", "_extras")
    ]
    assert broken(found) == []


def test_client_and_server_never_import_each_other():
    found = [
        i
        for i in imports()
        if (i.within("client") and i.reaches("server"))
        or (i.within("server") and i.reaches("client"))
    ]
    assert broken(found) == []


def test_the_core_imports_no_edge_library_at_import_time():
    found = [
        i
        for i in imports()
        if i.at_import_time
        and i.within("protocol", "client", "server")
        and not i.within(*CLIENT_EDGES, *SERVER_EDGES)
        and i.reaches(*EDGE_LIBRARIES, project=False)
    ]
    assert broken(found) == []


def test_the_core_never_imports_an_integration():
    # The httpx package's own ``import httpx`` is the third-party library, not this package.
    found = [
        i
        for i in imports()
        if i.within("protocol", "client", "server") and i.reaches(*INTEGRATIONS)
    ]
    assert broken(found) == []


def test_mcp_never_imports_an_http_edge():
    found = [i for i in imports() if i.within("mcp") and i.reaches(*HTTP_EDGES)]
    assert broken(found) == []


def test_the_library_never_imports_the_harness():
    found = [i for i in imports() if i.within(*LIBRARY) and i.reaches(*HARNESS)]
    assert broken(found) == []


def test_the_evaluators_ground_truth_lives_in_the_harness():
    # ``is_fix_current`` labels evictions for the harness (domains.catalog, bench.oracle); the
    # library keeps only what a provider answers (``server.provider.current_fix``).
    library = [p for p in (SRC / ROOT).rglob("oracle.py") if p.parent.name in LIBRARY]
    assert library == []
    assert not any(i.within(*LIBRARY) and i.reaches("bench.oracle") for i in imports())


def test_every_listed_exception_still_occurs():
    """A break that is fixed leaves the list, so no exception outlives its reason."""
    found = {(i.path, i.module) for i in imports()}
    assert sorted(set(EXCEPTIONS) - found) == []


def test_inside_the_httpx_integration_httpx_names_the_library():
    # The package shares the library's name; its modules import it absolutely, so ``httpx`` in
    # them is the third-party library, never the package itself.
    import importlib

    import httpx

    for room in ("transport", "exchange", "extensions", "bounded", "discovery", "watch"):
        module = importlib.import_module(f"{ROOT}.httpx.{room}")
        assert module.httpx is httpx, room
    assert not Path(httpx.__file__).is_relative_to(SRC)


def _parents(module: str) -> Iterator[str]:
    """The packages importing ``module`` runs first (``a.b.c``: ``a``, ``a.b``)."""
    parts = module.split(".")
    for n in range(1, len(parts)):
        yield ".".join(parts[:n])


@functools.cache
def import_time_graph() -> dict[str, frozenset[str]]:
    """The project's own modules each module loads when imported: its import-time imports and
    their parent packages (``import a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first)."""
    graph: dict[str, set[str]] = {}
    for i in imports():
        importer = f"{ROOT}.{_module_of(i.path)}".rstrip(".")
        targets = graph.setdefault(importer, set(_parents(importer)))
        if i.at_import_time and i.module.startswith(ROOT):
            targets.update((i.module, *_parents(i.module)))
    return {m: frozenset(t - {m}) for m, t in graph.items()}


def chain_to_edge(start: str, edges: tuple[str, ...]) -> list[str] | None:
    """The shortest import chain from ``start`` to a module in ``edges`` (None: none)."""
    graph = import_time_graph()
    full = tuple(f"{ROOT}.{e}" for e in edges)
    came: dict[str, str | None] = {start: None}
    queue = [start]
    while queue:
        module = queue.pop(0)
        if module != start and any(module == e or module.startswith(e + ".") for e in full):
            chain = [module]
            while (before := came[chain[-1]]) is not None:
                chain.append(before)
            return chain[::-1]
        for nxt in sorted(graph.get(module, ())):
            if nxt not in came:
                came[nxt] = module
                queue.append(nxt)
    return None


def core_modules(package: str) -> list[str]:
    edges = tuple(f"{ROOT}.{e}" for e in CORES[package])
    return sorted(
        m
        for m in import_time_graph()
        if (m == f"{ROOT}.{package}" or m.startswith(f"{ROOT}.{package}."))
        and not any(m == e or m.startswith(e + ".") for e in edges)
    )


@pytest.mark.parametrize("package", ["protocol", "client", "server"])
def test_the_core_reaches_no_edge_of_the_project_however_indirectly(package):
    chains = [chain_to_edge(m, PROJECT_EDGES) for m in core_modules(package)]
    assert [" -> ".join(c) for c in chains if c is not None] == []


def test_the_transitive_rule_sees_a_chain_through_a_parent_package():
    # ``client.core`` loads an adapter only when a memory is made (function-local); importing
    # the adapter module itself runs ``client.stores`` first, and so reaches the edge.
    assert chain_to_edge(f"{ROOT}.client.core", CLIENT_EDGES) is None
    chain = chain_to_edge(f"{ROOT}.client.stores.sqlite", ("sqlite_schema",))
    assert chain == [f"{ROOT}.client.stores.sqlite", f"{ROOT}.sqlite_schema"]


def cycles(package: str) -> list[list[str]]:
    """The import cycles among ``package``'s own modules (every import counts, function-local
    and ``TYPE_CHECKING`` ones included: a cycle typing hides is still one)."""
    return import_cycles(import_graph(SRC, f"{ROOT}.{package}"))


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_has_no_import_cycle(package):
    assert cycles(package) == []


def test_the_project_has_no_import_cycle_across_its_packages():
    assert import_cycles(import_graph(SRC, ROOT)) == []


def test_every_package_is_checked_for_cycles():
    assert {"cli", "observe", "bench", "server", "client"} <= set(PACKAGES)


def test_the_shared_store_floor_imports_only_the_memorys_data():
    found = [
        i
        for i in imports()
        if i.within("client.shared") and i.reaches("client") and not i.reaches(*SHARED_MAY_IMPORT)
    ]
    assert broken(found) == []


def test_no_import_waits_behind_an_extras_check():
    # One guard per edge package, where its third-party imports are (hishel's try/except);
    # an ``E402`` exemption would mean an import waits behind a check again.
    waiting = [
        f"{path.relative_to(SRC)}:{n}"
        for path in sorted((SRC / ROOT).rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"noqa: E402", line)
    ]
    assert waiting == []
