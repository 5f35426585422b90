"""Each edge module names its extra when imported without it; the core needs none of them.

A missing dependency is simulated in a fresh interpreter by a ``sys.meta_path`` finder that
refuses to import it (the modules themselves are installed in the test environment).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

#: Third-party modules of every extra, blocked together when the core is imported.
EDGE_DEPENDENCIES = (
    "httpx",
    "fastapi",
    "starlette",
    "uvicorn",
    "cryptography",
    "rich",
    "matplotlib",
    "numpy",
    "anthropic",
    "openai",
    "stripe",
    "sqlalchemy",
    "psycopg",
    "mcp",
    "xllamacpp",
    "opentelemetry",
    "prometheus_client",
    "selenium",
    "pydantic_ai",
    "fastmcp",
    "agents",
    "langchain_core",
    "langgraph",
)

BLOCKER = """
import importlib.abc, json, sys

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
        return None

sys.meta_path.insert(0, Blocker())
"""


def run_blocked(blocked: tuple[str, ...], body: str) -> dict:
    """Run ``body`` in a fresh interpreter, ``blocked`` unimportable; it prints one JSON line."""
    code = f"BLOCKED = {set(blocked)!r}\n{BLOCKER}\n{textwrap.dedent(body)}"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


IMPORT_AND_REPORT = """
from invalidation_contracts._extras import MissingExtra
try:
    import {module}
except MissingExtra as exc:
    print(json.dumps({{"extra": exc.extra, "module": exc.module, "message": str(exc)}}))
else:
    print(json.dumps({{"extra": None}}))
"""


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        ("invalidation_contracts.httpx", ("httpx",), "httpx"),
        # The guard is the package's: a submodule imported first names the extra too.
        ("invalidation_contracts.httpx.transport", ("httpx",), "httpx"),
        ("invalidation_contracts.cli.admin_client", ("httpx",), "cli"),
        ("invalidation_contracts.server.http.app", ("fastapi",), "server"),
        ("invalidation_contracts.server.http.app", ("uvicorn",), "server"),
        ("invalidation_contracts.server.http.errors", ("fastapi",), "server"),
        ("invalidation_contracts.bench.figures", ("matplotlib",), "bench"),
        ("invalidation_contracts.bench.grid", ("rich",), "cli"),
        ("invalidation_contracts.cli.operator", ("rich",), "cli"),
        ("invalidation_contracts.planners.anthropic", ("anthropic",), "anthropic"),
        ("invalidation_contracts.planners.openai", ("openai",), "openai"),
        ("invalidation_contracts.client.stores.postgres", ("psycopg",), "postgres"),
        ("invalidation_contracts.mcp", ("mcp",), "mcp"),
        ("invalidation_contracts.mcp.session", ("mcp",), "mcp"),
        ("invalidation_contracts.observe", ("opentelemetry",), "otel"),
        ("invalidation_contracts.observe.install", ("fastapi",), "server"),
        ("invalidation_contracts.observe.page", ("opentelemetry",), "otel"),
        ("invalidation_contracts.observe.prometheus", ("prometheus_client",), "otel"),
        ("invalidation_contracts.pydantic_ai", ("pydantic_ai",), "pydantic-ai"),
        ("invalidation_contracts.pydantic_ai", ("mcp",), "mcp"),
        ("invalidation_contracts.openai_agents", ("agents",), "openai-agents"),
        ("invalidation_contracts.langchain", ("langchain_core",), "langchain"),
    ],
)
def test_an_edge_module_without_its_extra_names_the_extra(module, blocked, extra):
    report = run_blocked(blocked, IMPORT_AND_REPORT.format(module=module))

    assert report["extra"] == extra
    assert f"pip install '.[{extra}]'" in report["message"]


def test_the_protocol_client_and_server_core_import_without_any_extra():
    report = run_blocked(
        EDGE_DEPENDENCIES,
        """
        import invalidation_contracts.client
        import invalidation_contracts.protocol
        import invalidation_contracts.protocol.signing
        import invalidation_contracts.server
        from invalidation_contracts.client import FixMemory, TrustPolicy

        FixMemory("row").close()
        TrustPolicy(guard_parameters=True)
        loaded = sorted(m for m in BLOCKED if m in sys.modules)
        print(json.dumps({"loaded": loaded}))
        """,
    )
    assert report == {"loaded": []}


def test_signatures_without_the_signing_extra_name_it():
    report = run_blocked(
        ("cryptography",),
        """
        from invalidation_contracts._extras import MissingExtra
        from invalidation_contracts.client import TrustPolicy
        try:
            TrustPolicy(public_keys={"k1": "A" * 43})
        except MissingExtra as exc:
            print(json.dumps({"extra": exc.extra}))
        """,
    )
    assert report == {"extra": "signing"}


def test_the_stripe_backend_without_its_extra_names_it():
    report = run_blocked(
        ("stripe",),
        """
        from invalidation_contracts.domains.acme_billing.payments import (
            PaymentsConfigError, backend_from_env,
        )
        env = {"INVALIDATION_CONTRACTS_PAYMENTS": "stripe", "STRIPE_API_KEY": "sk_test_x"}
        try:
            backend_from_env(env)
        except PaymentsConfigError as exc:
            print(json.dumps({"extra": exc.__cause__.extra}))
        """,
    )
    assert report == {"extra": "stripe"}
