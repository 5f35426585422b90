"""The core/edge line, as Python draws it when it imports (issue 40).

Importing a core package (in a fresh interpreter) loads none of its edge modules and no SQL or
HTTP library: checked against ``sys.modules``, so an edge reached through any chain of imports
counts, not only a direct one. The static graph and its cycle finder (``tests/support/imports.py``,
used by tests/test_layering.py to pin 0 cycles per package) are checked here too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.support.imports import cycles, graph

SRC = Path(__file__).parents[1] / "src"
ROOT = "invalidation_contracts"

#: Libraries no core package may load: the SQL and HTTP stacks (and ctypes, which only the
#: inotify wake-up of the registry store uses).
EDGE_LIBRARIES = (
    "sqlite3",
    "sqlalchemy",
    "psycopg",
    "fastapi",
    "starlette",
    "uvicorn",
    "httpx",
    "ctypes",
)


#: What the agent side's core loads neither: the MCP, terminal, telemetry and signing stacks.
CLIENT_LIBRARIES = (
    "httpcore",
    "mcp",
    "mcp_types",
    "anyio",
    "rich",
    "opentelemetry",
    "cryptography",
)
#: The project's edges as the agent side sees them: everything but the memory's own core.
CLIENT_EDGES = (
    "client.stores",
    "httpx",
    "mcp",
    "server",
    "bench",
    "domains",
    "cli",
    "observe",
    "planners",
    "pydantic_ai",
    "openai_agents",
    "langchain",
    "llama_index",
    "adk",
    "header_timeout",
    "sqlite_schema",
)


@dataclass(frozen=True)
class Core:
    """A core package, the project modules (dotted, below ``ROOT``) it must never load, and the
    libraries it must not load beyond ``EDGE_LIBRARIES``."""

    package: str
    edges: tuple[str, ...]
    libraries: tuple[str, ...] = ()


#: One line per core package.
CORES = (
    Core("protocol", edges=("client", "server", "mcp", "cli", "httpx", "observe", "bench")),
    Core(
        "server",
        edges=(
            "server.app",
            "server.http",
            "server.sql",
            "server.store",
            "server.worker.contract",
            "server.worker.follower",
            "server.worker.runtime",
            "server.worker.wakeups",
            "server.worker.watchdog",
            "client",
            "mcp",
            "cli",
            "observe",
        ),
    ),
    Core("client", edges=CLIENT_EDGES, libraries=CLIENT_LIBRARIES),
    Core("client.shared", edges=CLIENT_EDGES, libraries=CLIENT_LIBRARIES),
)


def loaded(
    package: str, path: Sequence[Path] = (SRC,), *, statements: str | None = None
) -> frozenset[str]:
    """The modules a fresh interpreter holds after ``import package`` (or after ``statements``,
    one line of Python; ``path`` first on its ``sys.path``)."""
    code = (
        "import importlib, json, sys; "
        + (statements or f"importlib.import_module({package!r})")
        + "; print(json.dumps(sorted(sys.modules)))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in path)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return frozenset(json.loads(done.stdout))


def crossings(
    modules: frozenset[str],
    edges: Sequence[str],
    root: str = ROOT,
    libraries: Sequence[str] = (),
) -> list[str]:
    """The edge modules (``edges``, below ``root``) and edge libraries among ``modules``."""
    banned = [f"{root}.{edge}" for edge in edges] + list(EDGE_LIBRARIES) + list(libraries)
    return sorted(
        module
        for module in modules
        if any(module == ban or module.startswith(ban + ".") for ban in banned)
    )


@pytest.mark.parametrize("core", CORES, ids=lambda core: core.package)
def test_importing_a_core_package_loads_no_edge(core: Core) -> None:
    assert crossings(loaded(f"{ROOT}.{core.package}"), core.edges, libraries=core.libraries) == []


def test_a_default_memory_loads_only_its_in_memory_store() -> None:
    # The default store is an adapter too, loaded when a memory is made without one: pure Python,
    # no driver, and no other adapter with it.
    modules = loaded(
        ROOT, statements='from invalidation_contracts.client import FixMemory; FixMemory("row")'
    )
    assert crossings(modules, CLIENT_EDGES, libraries=CLIENT_LIBRARIES) == [
        f"{ROOT}.client.stores",
        f"{ROOT}.client.stores.inmemory",
    ]


def test_the_store_adapters_still_import_from_the_client_on_first_use() -> None:
    modules = loaded(
        ROOT,
        statements="from invalidation_contracts.client import SQLiteStore, InMemoryStore, Store; "
        "assert issubclass(SQLiteStore, Store) and issubclass(InMemoryStore, Store)",
    )
    assert "sqlite3" in modules


# -- the checkers themselves ---------------------------------------------------------------------


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return tmp_path


def test_the_boundary_check_fails_on_an_edge_reached_through_the_core(tmp_path: Path) -> None:
    # core imports helper, helper imports the edge module, which imports sqlite3: both count.
    src = _package(
        tmp_path,
        {
            "__init__.py": "from . import core\n",
            "core/__init__.py": "from .helper import x\n",
            "core/helper.py": "from ..edge.store import y as x\n",
            "edge/__init__.py": "",
            "edge/store.py": "import sqlite3\ny = sqlite3.sqlite_version\n",
        },
    )
    found = crossings(loaded("pkg.core", path=[src]), ["edge"], root="pkg")
    assert {"pkg.edge", "pkg.edge.store", "sqlite3"} <= set(found)


def test_the_boundary_check_passes_a_core_that_loads_its_edge_lazily(tmp_path: Path) -> None:
    src = _package(
        tmp_path,
        {
            "__init__.py": "",
            "core.py": "def open():\n    from .edge import store\n    return store\n",
            "edge/__init__.py": "",
            "edge/store.py": "import sqlite3\n",
        },
    )
    assert crossings(loaded("pkg.core", path=[src]), ["edge"], root="pkg") == []


def test_the_cycle_count_sees_a_cycle_closed_only_for_typing(tmp_path: Path) -> None:
    src = _package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from .b import B\n",
            "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n",
            "c.py": "from . import a\n",
        },
    )
    assert cycles(graph(src, "pkg")) == [["pkg.a", "pkg.b"]]


def test_the_cycle_count_finds_each_strongly_connected_component() -> None:
    edges = {
        "a": frozenset({"b"}),
        "b": frozenset({"c"}),
        "c": frozenset({"a", "d"}),
        "d": frozenset({"e"}),
        "e": frozenset({"d"}),
        "f": frozenset({"a"}),
    }
    assert cycles(edges) == [["a", "b", "c"], ["d", "e"]]
