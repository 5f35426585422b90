"""PydanticAI: ``ContractToolset`` drives real tool calls from PydanticAI's ``FunctionModel``
against a real MCP server; the memory learns, reuses, and drops what a rotation made stale."""

from __future__ import annotations

import json
import shlex
from typing import Any

import anyio
import mcp_types as types
import pytest
from tests.frameworks.conftest import PYTHON, SERVE_MCP, TOOL, Planner, rotate
from tests.mcp.scripted import scripted_server

pytest.importorskip("pydantic_ai")

from fastmcp.client.transports import StdioTransport  # noqa: E402
from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from invalidation_contracts.client import FixMemory  # noqa: E402
from invalidation_contracts.client.entries import EvictionReason  # noqa: E402
from invalidation_contracts.client.events import Evicted, Ignored, MemoryEvent, Restamped  # noqa: E402
from invalidation_contracts.mcp import names  # noqa: E402
from invalidation_contracts.mcp.serve import running_http  # noqa: E402
from invalidation_contracts.pydantic_ai import ContractToolset  # noqa: E402

pytestmark = [pytest.mark.frameworks, pytest.mark.mcp, pytest.mark.timeout(120)]


def scripted(planner: Planner) -> FunctionModel:
    """PydanticAI's function model playing ``planner``: it reads the retry prompt's text."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1].parts[-1]
        if isinstance(last, RetryPromptPart):
            return ModelResponse(parts=[ToolCallPart(TOOL, planner.retry(last.model_response()))])
        if isinstance(last, ToolReturnPart) and last.outcome != "success":  # a retry (2.x)
            return ModelResponse(
                parts=[ToolCallPart(TOOL, planner.retry(last.model_response_str()))]
            )
        if isinstance(last, ToolReturnPart):
            planner.shown.append(last.model_response_str())
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart(TOOL, planner.first(info.instructions or ""))])

    return FunctionModel(respond)


async def episode(toolset: ContractToolset, draft: dict[str, Any]) -> Planner:
    planner = Planner(draft)
    await Agent(scripted(planner), toolsets=[toolset], retries=3).run("subscribe the customer")
    return planner


def test_a_fix_learned_in_one_run_is_applied_in_the_next_and_dropped_after_a_rotation(
    server, provider, acme
):
    memory = FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()
    heard: list[MemoryEvent] = []

    async def body() -> list[Planner]:
        async with running_http(server) as url:
            toolset = ContractToolset(url, memory, watch_listener=heard.append)
            async with toolset:
                runs = [await episode(toolset, growth), await episode(toolset, growth)]
                seq = await anyio.to_thread.run_sync(rotate, acme, provider)
                assert toolset.contract is not None
                await toolset.contract.caught_up(seq)
                runs += [await episode(toolset, growth), await episode(toolset, growth)]
                return runs

    learn, reuse, after, relearned = anyio.run(body)
    (origin,) = memory.origins()

    assert len(learn.calls) == 2 and len(reuse.calls) == 1  # reused: patched in, one call
    assert len(after.calls) == 2  # nothing stale injected after the rotation
    assert "WINTERLAUNCH26" in after.shown[0] and len(relearned.calls) == 1
    assert [e.reason for e in heard if isinstance(e, Evicted)] == [EvictionReason.ROW_CHANGED]
    assert [e.suggestion.parameters for e in memory.entries(origin)] == [
        {"promo_code": "WINTERLAUNCH26"}
    ]


def test_the_model_is_shown_the_model_view_and_no_contract_metadata(server, acme):
    memory = FixMemory("row")

    async def body() -> Planner:
        async with running_http(server) as url, ContractToolset(url, memory) as toolset:
            return await episode(toolset, acme.family("governed-partner-growth").draft())

    planner = anyio.run(body)

    retry_text, success_text = planner.shown
    assert "SUMMERSALE25" in retry_text and json.loads(success_text)["success"] is True
    for member in ("table_versions", "contract_seq", "rules_version", '"scope"', '"patch"'):
        assert member not in retry_text and member not in success_text


def test_in_model_mode_the_fixes_are_in_the_instructions_and_the_model_applies_them(server, acme):
    memory = FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()
    seen: list[str | None] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info.instructions)
        if isinstance(messages[-1].parts[-1], ToolReturnPart):
            return ModelResponse(parts=[TextPart("done")])
        instructions = info.instructions or ""
        code = "SUMMERSALE25" if "SUMMERSALE25" in instructions else None
        return ModelResponse(parts=[ToolCallPart(TOOL, {**growth, "promo_code": code})])

    async def body() -> None:
        async with running_http(server) as url:
            async with ContractToolset(url, memory, apply="model") as toolset:
                await toolset.contract.call_tool(TOOL, growth)  # type: ignore[union-attr]
                await Agent(FunctionModel(respond), toolsets=[toolset]).run("subscribe")

    anyio.run(body)

    assert seen[0] is not None and "SUMMERSALE25" in seen[0]
    assert "when plan is" in seen[0] and "already applied" not in seen[0]


def test_over_stdio_a_serve_mcp_child_teaches_and_serves_a_fix(acme):
    memory = FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()

    async def body() -> list[Planner]:
        # a cold child imports the server on a shared machine: allow it time to initialize
        transport = StdioTransport(PYTHON, SERVE_MCP)
        toolset = ContractToolset(transport, memory, sdk={"init_timeout": 60, "read_timeout": 60})
        async with toolset:
            return [await episode(toolset, growth), await episode(toolset, growth)]

    learn, reuse = anyio.run(body)

    assert (len(learn.calls), len(reuse.calls)) == (2, 1)
    assert memory.origins() == ["mcp+stdio:" + shlex.join([PYTHON, *SERVE_MCP])]  # the target


def test_a_malformed_meta_contract_is_ignored_and_the_model_still_gets_the_answer(acme):
    memory = FixMemory("row")
    heard: list[MemoryEvent] = []

    def answer(arguments: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text="declined: card blocked")],
            is_error=True,
            _meta={names.CONTRACT: "garbage"},
        )

    async def body() -> Planner:
        async with running_http(scripted_server(acme, answer)) as url:
            async with ContractToolset(url, memory, listener=heard.append) as toolset:
                planner = Planner(acme.family("governed-partner-growth").draft())
                with pytest.raises(Exception, match="retries"):
                    await Agent(scripted(planner), toolsets=[toolset], retries=1).run("go")
                return planner

    planner = anyio.run(body)

    assert planner.shown and "declined: card blocked" in planner.shown[0]
    assert any(isinstance(e, Ignored) for e in heard)
    assert memory.entries("mcp://scripted") == []


def test_a_rotation_evicts_the_changed_row_and_restamps_the_rows_it_left_alone(
    server, provider, acme
):
    memory = FixMemory("row")
    families = ("governed-partner-growth", "control-partner-starter", "control-agency-pro")
    drafts = [acme.family(name).draft() for name in families]
    heard: list[MemoryEvent] = []

    async def body() -> tuple[list[Planner], list[Planner]]:
        async with running_http(server) as url:
            toolset = ContractToolset(url, memory, watch_listener=heard.append)
            async with toolset:
                learned = [await episode(toolset, d) for d in drafts]
                seq = await anyio.to_thread.run_sync(rotate, acme, provider)
                assert toolset.contract is not None
                await toolset.contract.caught_up(seq)
                after = [await episode(toolset, d) for d in drafts]
                return learned, after

    learned, after = anyio.run(body)

    assert [len(p.calls) for p in learned] == [2, 2, 2]
    evicted = [e.reason for e in heard if isinstance(e, Evicted)]
    restamped = [e for e in heard if isinstance(e, Restamped)]
    assert (evicted, len(restamped)) == ([EvictionReason.ROW_CHANGED], 2)  # 1 right, 0 wrong
    assert [len(p.calls) for p in after] == [2, 1, 1]  # nothing stale; the kept two reused


def test_a_fix_on_a_field_not_patchable_is_in_the_instructions_in_client_mode(server, acme):
    memory = FixMemory("row")
    funding = acme.family("funding-enterprise-annual").draft()
    heard: list[MemoryEvent] = []

    async def body() -> list[Planner]:
        async with running_http(server) as url:
            async with ContractToolset(url, memory, listener=heard.append) as toolset:
                return [await episode(toolset, funding), await episode(toolset, funding)]

    learn, reuse = anyio.run(body)

    assert (len(learn.calls), len(reuse.calls)) == (2, 1)
    assert reuse.calls[0]["payment_method_token"] == "acme_pm_visa_credit"
    assert not [e for e in heard if isinstance(e, Evicted)]  # no re-learning churn


def test_per_run_headers_keep_the_contract_in_each_run_s_own_copy(server, acme):
    memory = FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()

    def headers(ctx: Any) -> dict[str, str]:
        return {"x-user": "user-1"}  # per-user auth: each run connects with its own copy

    async def body() -> list[Planner]:
        async with running_http(server) as url:
            toolset = ContractToolset(url, memory, sdk={"headers": headers})
            return [await episode(toolset, growth), await episode(toolset, growth)]

    learn, reuse = anyio.run(body)
    (origin,) = memory.origins()

    assert (len(learn.calls), len(reuse.calls)) == (2, 1)  # the second run's fix was patched in
    assert [e.suggestion.parameters for e in memory.entries(origin)] == [
        {"promo_code": "SUMMERSALE25"}
    ]
