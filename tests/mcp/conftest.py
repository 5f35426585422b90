"""Shared pieces of the MCP tests: the Acme provider as a contract server, and a runner.

Every test here runs a real MCP client against a real MCP server (the SDK's): in process through
the SDK's own client, over stdio to a child process, or over streamable HTTP on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import pytest

from invalidation_contracts.domains import get_catalog
from invalidation_contracts.domains.catalog import DomainCatalog
from invalidation_contracts.mcp import contract_server
from invalidation_contracts.server import Provider

OPERATION = "POST /v1/subscriptions"
TOOL = "create_subscription"
T = TypeVar("T")


def run(fn: Callable[[], Awaitable[T]]) -> T:
    """Run an async test body on a fresh event loop (asyncio, the SDK's default backend)."""
    return anyio.run(fn)


@pytest.fixture
def acme() -> DomainCatalog:
    return get_catalog("acme_billing")


@pytest.fixture
def provider(acme: DomainCatalog) -> Provider:
    return Provider(acme.domain)


@pytest.fixture
def server(provider: Provider) -> Any:
    return contract_server(provider, tool_names={OPERATION: TOOL})


def rotate(acme: DomainCatalog, provider: Provider, snapshot: str = "active_csm_codes.rotation-1"):
    """The operator reloads a table from one of the domain's snapshots; the reload's result."""
    snap = acme.read_snapshot(snapshot)
    return provider.registry.reload(snap.table, snap.rows, snap.version)
