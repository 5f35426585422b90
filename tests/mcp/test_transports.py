"""The contract over MCP's real transports: a child process over stdio, streamable HTTP on
127.0.0.1, and the ``serve-mcp`` command."""

from __future__ import annotations

import os
import sys

import anyio
import pytest
from mcp import StdioServerParameters
from tests.mcp.conftest import OPERATION, TOOL, rotate, run

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.client.events import Evicted, MemoryEvent, Stored
from invalidation_contracts.mcp import connect
from invalidation_contracts.mcp.serve import running_http

pytestmark = [pytest.mark.mcp, pytest.mark.timeout(120)]


def test_over_stdio_a_serve_mcp_child_teaches_a_fix(acme):
    memory = FixMemory("row")
    command = StdioServerParameters(
        command=sys.executable,
        args=[
            *("-m", "invalidation_contracts.cli", "serve-mcp", "--domain", "acme_billing"),
            *("--tool-name", f"{OPERATION}={TOOL}", "--ephemeral"),
        ],
        env=dict(os.environ),  # the child imports this tree (PYTHONPATH), not another install
    )
    growth = acme.family("governed-partner-growth").draft()

    async def body() -> tuple[str, list[MemoryEvent], int]:
        async with connect(command, memory) as tools:
            reply = await tools.call_tool(TOOL, growth)
            fixes = (await tools.lookup(TOOL, growth)).entries
            patched = {**growth, **fixes[0].suggestion.parameters}
            second = await tools.call_tool(TOOL, patched, injected=fixes)
            return tools.origin, list(reply.events), second.status

    origin, events, status = run(body)

    assert origin.startswith("mcp+stdio:") and "serve-mcp --domain acme_billing" in origin
    assert [type(e) for e in events] == [Stored]
    assert status == 200


def test_over_streamable_http_a_rotation_is_pushed_and_evicts_before_the_next_call(
    server, provider, acme
):
    memory = FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()
    heard: list[MemoryEvent] = []

    async def body() -> list[str]:
        async with (
            running_http(server) as url,
            connect(url, memory, watch_listener=heard.append) as tools,
        ):
            assert url.startswith("http://127.0.0.1:")
            await tools.call_tool(TOOL, growth)
            result = await anyio.to_thread.run_sync(rotate, acme, provider)
            await tools.caught_up(result.contract_seq)
            return [e.id for e in (await tools.lookup(TOOL, growth)).entries]

    assert run(body) == []
    assert [e.reason for e in heard if isinstance(e, Evicted)] == [EvictionReason.ROW_CHANGED]


def test_two_servers_with_the_same_name_never_share_fixes(acme):
    """Two deployments of one domain (same ``serverInfo.name``, separate histories) over
    streamable HTTP: each keeps its own memory; a call to the second evicts nothing of the
    first's (with name-keyed origins it resync-evicted all of them)."""
    from invalidation_contracts.mcp import contract_server
    from invalidation_contracts.server import Provider

    memory = FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()
    first = contract_server(Provider(acme.domain), tool_names={OPERATION: TOOL})
    second = contract_server(Provider(acme.domain), tool_names={OPERATION: TOOL})

    async def body() -> tuple[str, str, list[str], list[str]]:
        async with running_http(first) as url_a, running_http(second) as url_b:
            async with connect(url_a, memory) as a:
                await a.call_tool(TOOL, growth)
                origin_a = a.origin
            async with connect(url_b, memory) as b:
                served_b = [e.id for e in (await b.lookup(TOOL, growth)).entries]
                await b.call_tool(TOOL, growth)
                origin_b = b.origin
            return origin_a, origin_b, served_b, [e.id for e in memory.entries(origin_a)]

    origin_a, origin_b, served_b, kept_a = run(body)

    assert origin_a != origin_b and origin_a.startswith("mcp+http://127.0.0.1:")
    assert served_b == []  # the first server's fix is not served for the second
    assert kept_a == ["e1"]  # and the second's contract evicted nothing of the first's
    assert memory.tombstones(origin_a) == []
