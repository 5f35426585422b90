"""The agent side's core/edge line, true in a fresh interpreter (issue 40, item 3).

``import invalidation_contracts.client`` (and a default ``FixMemory``) must load no edge: none of
the store adapters (``client.stores``: SQLite, PostgreSQL), the command line, the integrations,
the server, the harness, nor a database driver or an HTTP, MCP or terminal library. Read from
``sys.modules`` in a subprocess, so an import any module makes at import time counts, however
deep. (tests/test_layering.py reads the same line from the source, statically.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

ROOT = "invalidation_contracts"
#: The project's edges, as module prefixes: the core may load none of them.
PROJECT_EDGES = tuple(
    f"{ROOT}.{name}"
    for name in (
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
        "header_timeout",
        "sqlite_schema",
    )
)
#: Libraries only an edge loads (the standard library's database drivers included).
EDGE_LIBRARIES = (
    "sqlite3",
    "ctypes",
    "psycopg",
    "sqlalchemy",
    "httpx",
    "httpcore",
    "mcp",
    "mcp_types",
    "anyio",
    "fastapi",
    "starlette",
    "uvicorn",
    "rich",
    "opentelemetry",
    "cryptography",
)


def edges_loaded(statements: str) -> list[str]:
    """The edge modules loaded after running ``statements`` in a fresh interpreter."""
    code = textwrap.dedent(
        f"""
        import json, sys
        {statements}
        edges = {PROJECT_EDGES!r}
        libraries = {EDGE_LIBRARIES!r}
        print(json.dumps(sorted(
            m for m in sys.modules
            if any(m == e or m.startswith(e + ".") for e in edges)
            or m.partition(".")[0] in libraries
        )))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "statements",
    [
        "import invalidation_contracts.client",
        "import invalidation_contracts.client.shared",
        "import invalidation_contracts.protocol",
    ],
)
def test_the_client_core_loads_no_edge(statements):
    assert edges_loaded(statements) == []


def test_a_default_memory_loads_only_its_in_memory_store():
    # The default store is an adapter too, loaded when a memory is made without one: pure Python,
    # no driver, and no other adapter with it.
    loaded = edges_loaded('from invalidation_contracts.client import FixMemory; FixMemory("row")')
    assert loaded == [f"{ROOT}.client.stores", f"{ROOT}.client.stores.inmemory"]


def test_the_check_sees_an_edge_the_core_would_load():
    # The same check on an adapter: what a core module importing it would bring in.
    loaded = edges_loaded("import invalidation_contracts.client.stores.sqlite")
    assert "sqlite3" in loaded
    assert f"{ROOT}.client.stores.sqlite" in loaded


def test_the_store_adapters_still_import_from_the_client_on_first_use():
    loaded = edges_loaded(
        "from invalidation_contracts.client import SQLiteStore, InMemoryStore, Store\n"
        "        assert issubclass(SQLiteStore, Store) and issubclass(InMemoryStore, Store)"
    )
    assert "sqlite3" in loaded
