"""Restart and drift over MCP: ``serve-mcp`` keeps its history in a registry file, the data changes
while no agent runs (no server either), and a new session over stdio serves 0 stale fixes on its
very first lookup — ``ContractSession.__aenter__`` returns only after the confirmation read."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from mcp import StdioServerParameters
from tests.mcp.conftest import OPERATION, TOOL, run

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.domains import get_catalog
from invalidation_contracts.mcp import connect
from invalidation_contracts.server.http.service import ContractService

pytestmark = [pytest.mark.mcp, pytest.mark.timeout(180)]

ACME = get_catalog("acme_billing")
GROWTH = ACME.family("governed-partner-growth").draft()  # its CSM code rotates at rotation-1
STARTER = ACME.family("control-partner-starter").draft()  # a row the rotation leaves alone


def server(registry: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=[
            *("-m", "invalidation_contracts.cli", "serve-mcp", "--domain", "acme_billing"),
            *("--db", str(registry), "--tool-name", f"{OPERATION}={TOOL}"),
        ],
        env=dict(os.environ),  # the child imports this tree (PYTHONPATH), not another install
    )


def drift_while_away(registry: Path) -> None:
    service = ContractService.open(ACME.domain, level=6, store=str(registry))
    try:
        snapshot = ACME.read_snapshot("active_csm_codes.rotation-1")
        service.reload(snapshot.table, snapshot.rows, snapshot.version)
    finally:
        service.close()


def test_a_new_mcp_session_serves_no_stale_fix_on_its_first_lookup(tmp_path):
    registry, memory_path = tmp_path / "registry.sqlite", tmp_path / "memory.sqlite"

    async def learn() -> None:
        with FixMemory("row", store=memory_path) as memory:
            async with connect(server(registry), memory) as tools:
                for draft in (GROWTH, STARTER):
                    await tools.call_tool(TOOL, draft)
                    (fix,) = (await tools.lookup(TOOL, draft)).entries
                    patched = {**draft, **fix.suggestion.parameters}
                    assert (await tools.call_tool(TOOL, patched, injected=[fix])).status == 200

    async def come_back() -> tuple[list[str], int, list[EvictionReason]]:
        with FixMemory("row", store=memory_path) as memory:
            async with connect(server(registry), memory) as tools:
                growth = (await tools.lookup(TOOL, GROWTH)).entries  # at once: no sleep, no episode
                (starter,) = (await tools.lookup(TOOL, STARTER)).entries
                patched = {**STARTER, **starter.suggestion.parameters}
                reply = await tools.call_tool(TOOL, patched, injected=[starter])
                reasons = [t.reason for t in memory.tombstones(tools.origin)]
                return [e.id for e in growth], reply.status, reasons

    run(learn)
    drift_while_away(registry)
    growth, status, reasons = run(come_back)

    assert growth == []  # the stale SUMMERSALE25 is never served
    assert status == 200  # the unmoved starter fix is served and still right
    assert reasons == [EvictionReason.ROW_CHANGED]
