"""The pieces adapters stand on: the call hook, the model-view result, draft-less fixes, and a
``ContractSession`` over a session someone else opened. Real SDK client and server, in process."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from tests.mcp.conftest import TOOL, run
from tests.mcp.scripted import scripted_server

from invalidation_contracts.client import FixMemory, PatchSkipped
from invalidation_contracts.mcp import ContractSession, connect
from invalidation_contracts.mcp.origins import BY_SERVER_NAME
from invalidation_contracts.protocol.wirecost import ENVELOPE_FIELDS

pytestmark = pytest.mark.mcp


def test_the_hook_answers_the_model_view_and_whether_it_is_an_error(server, acme):
    growth = acme.family("governed-partner-growth").draft()

    async def body() -> list[tuple[str, bool]]:
        async with connect(server, FixMemory("row")) as tools:
            return [await tools.hook(TOOL, growth), await tools.hook(TOOL, growth)]

    (first, failed), (second, ok) = run(body)

    assert failed and "SUMMERSALE25" in first and not set(ENVELOPE_FIELDS) & set(json.loads(first))
    assert not ok and json.loads(second)["success"] is True  # the fix was patched in


def test_in_model_mode_the_hook_sends_the_arguments_as_they_are(server, acme):
    growth = acme.family("governed-partner-growth").draft()

    async def body() -> tuple[bool, int]:
        async with connect(server, FixMemory("row"), apply="model") as tools:
            await tools.hook(TOOL, growth)
            _, failed = await tools.hook(TOOL, growth)  # the model did not add the code
            fixed = await tools.answer(TOOL, {**growth, "promo_code": "SUMMERSALE25"})
            return failed, fixed.status

    failed, status = run(body)

    assert failed  # nothing was patched in
    assert status == 200  # the model applied the fix it was shown


def test_an_unknown_apply_mode_is_refused(server):
    async def body() -> None:
        async with Client(server) as client:
            with pytest.raises(ValueError, match="apply must be one of"):
                ContractSession(
                    client.session, FixMemory("row"), origin=BY_SERVER_NAME, apply="auto"
                )

    run(body)


def test_a_reply_converts_to_a_result_that_carries_only_the_model_view(server, acme):
    async def body() -> tuple[types.CallToolResult, str]:
        async with connect(server, FixMemory("row")) as tools:
            reply = await tools.call_tool(TOOL, acme.family("governed-partner-growth").draft())
            return reply.to_call_tool_result(), reply.for_model

    result, for_model = run(body)

    (text,) = result.content
    assert isinstance(text, types.TextContent) and text.text == for_model
    assert result.is_error and result.meta is None
    assert result.structured_content == json.loads(for_model)


def test_fixes_for_a_tool_lists_what_a_prompt_before_any_draft_may_show(server, acme):
    growth = acme.family("governed-partner-growth").draft()
    starter = acme.family("plain-starter-monthly").draft()

    async def body() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        async with connect(server, FixMemory("row")) as tools:
            await tools.call_tool(TOOL, growth)
            await tools.call_tool(TOOL, starter)
            fixes = (await tools.lookup(TOOL)).entries
            other = (await tools.lookup("another_tool")).entries
            return [e.suggestion.parameters for e in fixes], [e.key.scope for e in other]

    assert run(body) == ([{"promo_code": "SUMMERSALE25"}], [])


def test_a_contract_session_wraps_a_session_a_framework_opened(server, acme):
    memory = FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()

    async def body() -> str:
        async with Client(server) as client:  # the framework's connection
            async with ContractSession(client.session, memory, origin=BY_SERVER_NAME) as tools:
                await tools.hook(TOOL, growth)
            # the framework's session outlives the wrapper and still works
            result = await client.call_tool(TOOL, {**growth, "promo_code": "SUMMERSALE25"})
            return "ok" if not result.is_error else "error"

    assert run(body) == "ok"
    assert [e.type for e in memory.entries("mcp://acme_billing")] == ["ADD_REQUIRED_PROMO_CODE"]


def test_the_session_s_relevant_and_fixes_for_warn_naming_lookup_and_still_serve(server, acme):
    growth = acme.family("governed-partner-growth").draft()

    async def body() -> tuple[list[str], list[str], list[str]]:
        async with connect(server, FixMemory("row")) as tools:
            await tools.call_tool(TOOL, growth)
            with pytest.warns(DeprecationWarning, match=r"ContractSession\.lookup"):
                relevant = await tools.relevant(TOOL, growth)
            with pytest.warns(DeprecationWarning, match=r"ContractSession\.lookup"):
                every = await tools.fixes_for(TOOL)
            looked_up = (await tools.lookup(TOOL, growth)).entries
            return [e.id for e in relevant], [e.id for e in every], [e.id for e in looked_up]

    relevant, every, looked_up = run(body)

    assert relevant == every == looked_up == ["e1"]


def test_a_fix_the_client_cannot_patch_is_a_skipped_patch_event_and_not_an_injection(server, acme):
    funding = acme.family("funding-enterprise-annual").draft()  # its field is not patchable
    heard: list[Any] = []

    async def body() -> tuple[str, Any]:
        async with connect(server, FixMemory("row"), listener=heard.append) as tools:
            await tools.answer(TOOL, funding)  # learns the fix
            prompt = await tools.tool_prompt(TOOL)
            await tools.answer(TOOL, funding)  # the model did not apply it
            (entry,) = await tools.memory.entries(tools.origin)
            return prompt, entry

    prompt, entry = run(body)

    skipped = [e for e in heard if isinstance(e, PatchSkipped)]
    assert "acme_pm_visa_credit" in prompt and "when payment_method_token is" in prompt
    assert [e.detail for e in skipped] == ["no patch; left to the planner"]
    assert entry.derived_from == ()  # what the second failure taught names no injection


def test_in_client_mode_a_patchable_fix_is_patched_and_not_shown(server, acme):
    growth = acme.family("governed-partner-growth").draft()

    async def body() -> str:
        async with connect(server, FixMemory("row")) as tools:
            await tools.answer(TOOL, growth)
            return await tools.tool_prompt(TOOL)

    assert run(body) == ""


def test_calls_that_bypass_the_memory_log_one_warning_per_origin(server, acme, caplog):
    growth = acme.family("governed-partner-growth").draft()

    async def taught() -> types.CallToolResult:
        async with Client(server) as client:
            return await client.session.call_tool(TOOL, growth)

    origin = f"mcp://bypass-{uuid.uuid4().hex}"
    rejection = run(taught)  # a real rejection, replayed by a server that publishes no
    replaying = scripted_server(acme, lambda arguments: rejection)  # patchable fields

    async def body() -> None:
        # an origin of this test's own: the warning is once per origin and process
        async with connect(replaying, FixMemory("row"), origin=origin) as tools:
            for _ in range(3):  # learns, then cannot patch twice
                await tools.answer(TOOL, growth)

    with caplog.at_level(logging.WARNING, logger="invalidation_contracts.client"):
        run(body)

    bypasses = [r.getMessage() for r in caplog.records if "bypass the fix memory" in r.message]
    assert len(bypasses) == 1 and origin in bypasses[0]
