"""The client side: a ``ContractSession`` feeds every tool result to the fix memory, reads the
memory's needs from the contract resources, and hears table moves before the next call."""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from tests.mcp.conftest import OPERATION, TOOL, rotate, run
from tests.mcp.scripted import acme_problem, error_result, scripted_server

from invalidation_contracts.client import FixMemory, TrustPolicy
from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.client.events import (
    Evicted,
    Ignored,
    MemoryEvent,
    Restamped,
    Stored,
)
from invalidation_contracts.mcp import ContractSession, connect, contract_server, names
from invalidation_contracts.mcp.origins import BY_SERVER_NAME
from invalidation_contracts.protocol.wirecost import ENVELOPE_FIELDS
from invalidation_contracts.server import Provider, TableChange

pytestmark = pytest.mark.mcp

ORIGIN = "mcp://acme_billing"


def test_a_rejected_call_teaches_a_fix_filed_under_the_server_and_the_tool(server, acme):
    memory = FixMemory("row")

    async def body() -> tuple[str, list[MemoryEvent]]:
        async with connect(server, memory) as tools:
            reply = await tools.call_tool(TOOL, acme.family("governed-partner-growth").draft())
            return tools.origin, list(reply.events)

    origin, events = run(body)

    assert origin == ORIGIN
    (stored,) = [e for e in events if isinstance(e, Stored)]
    assert (stored.key.origin, stored.key.operation, stored.key.type) == (
        ORIGIN,
        TOOL,
        "ADD_REQUIRED_PROMO_CODE",
    )


def test_a_fix_serves_matching_arguments_of_its_own_tool_only(server, acme):
    memory = FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()

    async def body() -> tuple[list[str], list[str], list[str]]:
        async with connect(server, memory) as tools:
            await tools.call_tool(TOOL, growth)
            same = (await tools.lookup(TOOL, growth)).entries
            starter = acme.family("plain-starter-monthly").draft()
            other_plan = (await tools.lookup(TOOL, starter)).entries
            other_tool = (await tools.lookup("another_tool", growth)).entries
            return [e.id for e in same], [e.id for e in other_plan], [e.id for e in other_tool]

    assert run(body) == (["e1"], [], [])


def test_the_model_view_of_a_result_carries_no_contract_metadata(server, acme):
    memory = FixMemory("row")

    async def body() -> tuple[dict[str, Any], dict[str, Any]]:
        async with connect(server, memory) as tools:
            reply = await tools.call_tool(TOOL, acme.family("governed-partner-growth").draft())
            return reply.body, json.loads(reply.for_model)

    received, shown = run(body)

    assert set(ENVELOPE_FIELDS) <= set(received)
    assert not set(ENVELOPE_FIELDS) & set(shown)
    (suggestion,) = shown["recovery_feedback"]["suggestions"]
    assert set(suggestion) == {"type", "action", "message", "parameters"}
    assert suggestion["parameters"] == {"promo_code": "SUMMERSALE25"}


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_table_rotation_evicts_the_stale_fix_before_the_next_call(server, provider, acme, mode):
    memory = FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()
    heard: list[MemoryEvent] = []

    async def body() -> list[str]:
        async with connect(
            server, memory, sdk={"mode": mode}, watch_listener=heard.append
        ) as tools:
            await tools.call_tool(TOOL, growth)
            result = await anyio.to_thread.run_sync(rotate, acme, provider)
            await tools.caught_up(result.contract_seq)
            return [e.id for e in (await tools.lookup(TOOL, growth)).entries]

    assert run(body) == []
    assert [(e.entry_id, e.reason) for e in heard if isinstance(e, Evicted)] == [
        ("e1", EvictionReason.ROW_CHANGED)
    ]


def test_a_client_keyword_beside_the_options_still_reaches_the_client_with_a_warning(server):
    """The 0.2 spelling (an SDK keyword among the session's) works until 0.3.0, warned."""

    async def body() -> object:
        with pytest.warns(DeprecationWarning, match=r"connect\(\.\.\., mode=\.\.\.\)"):
            async with connect(server, FixMemory("row"), mode="legacy") as tools:  # type: ignore[call-arg]
                return tools.session.protocol_version

    assert run(body) not in MODERN_PROTOCOL_VERSIONS


def test_without_notifications_the_next_result_reveals_the_move_and_the_feed_is_a_resource(
    server, provider, acme
):
    memory = FixMemory("row")
    growth, starter = (
        acme.family(f).draft() for f in ("governed-partner-growth", "funding-partner-starter")
    )

    async def body() -> list[MemoryEvent]:
        async with connect(server, memory, watch=False) as tools:
            await tools.call_tool(TOOL, growth)
            await tools.call_tool(TOOL, starter)
            rotate(acme, provider)
            reply = await tools.call_tool(TOOL, acme.family("plain-starter-monthly").draft())
            return list(reply.events)

    events = run(body)

    assert [(e.entry_id, e.reason) for e in events if isinstance(e, Evicted)] == [
        ("e1", EvictionReason.ROW_CHANGED)
    ]
    assert [e.entry_id for e in events if isinstance(e, Restamped)] == ["e2"]


def test_a_position_the_server_no_longer_covers_is_answered_410_and_evicts_for_resync(acme):
    provider = Provider(acme.domain, registry=acme.domain.registry(log_capacity=1))
    memory = FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()

    async def body() -> list[MemoryEvent]:
        async with connect(contract_server(provider), memory, watch=False) as tools:
            await tools.call_tool("post_v1_subscriptions", growth)
            for snapshot in ("rotation-1", "rotation-2", "rotation-3"):
                rotate(acme, provider, f"active_csm_codes.{snapshot}")
            reply = await tools.call_tool(
                "post_v1_subscriptions", acme.family("plain-starter-monthly").draft()
            )
            return list(reply.events)

    evicted = [e for e in run(body) if isinstance(e, Evicted)]

    assert [(e.entry_id, e.reason) for e in evicted] == [("e1", EvictionReason.RESYNC)]


def test_client_apply_mode_patches_the_arguments_with_the_cached_fix(server, acme):
    memory = FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()

    async def body() -> tuple[dict[str, Any], int]:
        async with connect(server, memory) as tools:
            await tools.call_tool(TOOL, growth)
            fixes = (await tools.lookup(TOOL, growth)).entries
            patched = await tools.apply_patches(TOOL, growth, fixes)
            reply = await tools.call_tool(TOOL, patched.request, injected=fixes)
            return patched.request, reply.status

    request, status = run(body)

    assert request == {**growth, "promo_code": "SUMMERSALE25"}
    assert status == 200


@pytest.mark.parametrize(
    "structured",
    [{"detail": "no status here"}, ["a", "list"], {"status": 200, "title": "not an error"}],
    ids=["no-status", "not-an-object", "success-status"],
)
def test_an_error_whose_structured_content_is_not_a_problem_document_is_ignored(acme, structured):
    memory = FixMemory("row")
    server = scripted_server(acme, lambda _arguments: error_result(structured))

    async def body() -> list[MemoryEvent]:
        async with connect(server, memory, origin="mcp://scripted") as tools:
            reply = await tools.call_tool(TOOL, acme.family("governed-partner-growth").draft())
            return list(reply.events)

    events = run(body)

    assert [type(e) for e in events] == [Ignored]
    assert memory.entries("mcp://scripted") == []


def test_a_problem_with_malformed_contract_fields_is_ignored_and_nothing_is_stored(acme):
    memory = FixMemory("row")

    def answer(arguments: dict[str, Any]) -> Any:
        return error_result({**acme_problem(acme, arguments), "table_versions": "garbage"})

    async def body() -> list[MemoryEvent]:
        async with connect(scripted_server(acme, answer), memory) as tools:
            reply = await tools.call_tool(TOOL, acme.family("governed-partner-growth").draft())
            return list(reply.events)

    events = run(body)

    assert [type(e) for e in events] == [Ignored]
    assert "malformed contract fields" in events[0].detail
    assert memory.entries("mcp://scripted") == []


@pytest.mark.parametrize("origin", [None, ""])
def test_a_wrapped_session_without_an_origin_is_refused_at_construction(acme, origin):
    server = contract_server(Provider(acme.domain), name="billing-eu")

    async def body() -> None:
        async with Client(server) as client:
            with pytest.raises(ValueError, match="needs origin="):
                ContractSession(client.session, FixMemory("row"), origin=origin)

    run(body)


def test_a_session_asked_to_keys_its_memory_by_the_name_the_server_gives(acme):
    memory = FixMemory("row")
    server = contract_server(Provider(acme.domain), name="billing-eu")

    async def body() -> str:
        async with (
            Client(server) as client,
            ContractSession(client.session, memory, origin=BY_SERVER_NAME) as tools,
        ):
            return tools.origin

    assert run(body) == "mcp://billing-eu"


def test_a_notification_storm_of_bumps_is_bounded_by_the_eviction_rate(server, provider, acme):
    memory = FixMemory("table", trust=TrustPolicy(max_evictions_per_table=2, window_s=3600))
    growth = acme.family("governed-partner-growth").draft()
    heard: list[MemoryEvent] = []

    def touch_every_table() -> int:
        seq = 0
        for _ in range(5):  # a storm: every table bumped five times, no row changed
            tables = provider.registry.state.tables.items()
            bumps = {
                name: TableChange.reload(snap.plain_rows(), f"{snap.version}.1")
                for name, snap in tables
            }
            seq = next(iter(provider.registry.apply(bumps).values())).contract_seq
        return seq

    async def episode(tools: ContractSession) -> int:
        fixes = (await tools.lookup(TOOL, growth)).entries
        arguments = {**growth, **{k: v for f in fixes for k, v in f.suggestion.parameters.items()}}
        first = await tools.call_tool(TOOL, arguments, injected=fixes)
        return 1 if first.status == 200 else 2

    async def body() -> list[int]:
        attempts = []
        async with connect(server, memory, watch_listener=heard.append) as tools:
            for _ in range(5):
                attempts.append(await episode(tools))
                if attempts[-1] == 2:
                    await tools.call_tool(TOOL, {**growth, "promo_code": "SUMMERSALE25"})
                seq = await anyio.to_thread.run_sync(touch_every_table)
                await tools.caught_up(seq)
        return attempts

    attempts = run(body)

    evicted = [e for e in heard if isinstance(e, Evicted)]
    assert [e.reason for e in evicted] == [EvictionReason.TABLE_CHANGED] * 2
    assert attempts == [2, 2, 2, 1, 1]


def test_a_server_of_the_inline_envelope_still_teaches_and_serves_fixes(provider, acme):
    inline = contract_server(provider, tool_names={OPERATION: TOOL}, envelope="inline")
    memory = FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()

    async def body() -> tuple[str, list[str], int]:
        async with connect(inline, memory) as tools:
            first = await tools.call_tool(TOOL, growth)
            fixes = (await tools.lookup(TOOL, growth)).entries
            patched = await tools.apply_patches(TOOL, growth, fixes)
            second = await tools.call_tool(TOOL, patched.request, injected=fixes)
            return first.for_model, [e.id for e in fixes], second.status

    shown, fixes, status = run(body)

    assert fixes == ["e1"] and status == 200
    assert not set(ENVELOPE_FIELDS) & set(json.loads(shown))


def test_a_plain_host_is_shown_exactly_the_model_view(server, acme):
    memory = FixMemory("row")

    async def body() -> tuple[str, str]:
        async with connect(server, memory) as tools:
            reply = await tools.call_tool(TOOL, acme.family("governed-partner-growth").draft())
            (text,) = reply.result.content
            assert isinstance(text, types.TextContent)
            return text.text, reply.for_model

    host_text, for_model = run(body)

    assert host_text == for_model


@pytest.mark.parametrize("contract", [["a", "list"], "text", 7], ids=["list", "string", "number"])
def test_a_malformed_meta_contract_is_ignored_and_the_model_still_gets_the_answer(acme, contract):
    memory = FixMemory("row")

    def answer(arguments: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="rejected: add a promo code")],
            is_error=True,
            _meta={names.CONTRACT: contract},
        )

    async def body() -> tuple[list[MemoryEvent], str]:
        async with connect(scripted_server(acme, answer), memory) as tools:
            reply = await tools.call_tool(TOOL, acme.family("governed-partner-growth").draft())
            return list(reply.events), reply.for_model

    events, shown = run(body)

    assert [type(e) for e in events] == [Ignored]
    assert "_meta contract" in events[0].detail
    assert shown == "rejected: add a promo code"
    assert memory.entries("mcp://scripted") == []


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_lookup_at_once_after_the_notification_serves_no_stale_fix(server, provider, acme, mode):
    """The drift window is 0: the refresh a ``resources/updated`` starts is held back, and a
    lookup made meanwhile (notification heard, diff not yet read) serves nothing stale."""
    memory = FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()
    entered, release = anyio.Event(), anyio.Event()

    async def body() -> tuple[list[str], list[str], list[str]]:
        async with connect(server, memory, sdk={"mode": mode}) as tools:
            await tools.call_tool(TOOL, growth)
            before = [e.id for e in (await tools.lookup(TOOL, growth)).entries]
            with anyio.fail_after(10):
                while tools._watcher.refreshes < 1:  # the refresh on subscribing is done
                    await anyio.sleep(0.01)
            refresh = tools._watcher._refresh

            async def held_back() -> int | None:
                entered.set()
                await release.wait()
                return await refresh()

            tools._watcher._refresh = held_back
            result = await anyio.to_thread.run_sync(rotate, acme, provider)
            with anyio.fail_after(10):
                await entered.wait()
            during = [e.id for e in (await tools.lookup(TOOL, growth)).entries]
            release.set()
            await tools.caught_up(result.contract_seq)
            after = [e.id for e in (await tools.lookup(TOOL, growth)).entries]
            return before, during, after

    assert run(body) == (["e1"], [], [])
