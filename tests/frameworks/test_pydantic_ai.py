"""PydanticAI: ``ContractToolset`` drives real tool calls from PydanticAI's ``FunctionModel``
against a real MCP server; the memory learns, reuses, and drops what a rotation made stale."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from tests.frameworks.conftest import PYTHON, SERVE_MCP, TOOL, Planner
from tests.frameworks.driver import (
    Framework,
    Listener,
    check_a_fix_is_reused_then_dropped_after_a_rotation_and_learned_again,
    check_a_rotation_evicts_the_changed_row_and_restamps_the_others,
    check_stdio_teaches_and_serves,
    check_the_model_read_what_the_memory_could_not,
    check_the_model_view,
    declined,
)
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
from invalidation_contracts.client.events import Evicted, MemoryEvent  # noqa: E402
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


@asynccontextmanager
async def _toolset(url: str, memory: FixMemory, listener: Listener) -> AsyncIterator[Any]:
    toolset = ContractToolset(url, memory, watch_listener=listener)
    async with toolset:
        yield toolset, toolset.contract


PYDANTIC_AI = Framework(_toolset, episode)


def test_a_fix_learned_in_one_run_is_applied_in_the_next_and_dropped_after_a_rotation(
    server, provider, acme
):
    runs = check_a_fix_is_reused_then_dropped_after_a_rotation_and_learned_again(
        PYDANTIC_AI, server, provider, acme
    )

    assert "WINTERLAUNCH26" in runs[2].shown[0]  # the new fix, taught after the rotation


def test_the_model_is_shown_the_model_view_and_no_contract_metadata(server, acme):
    memory = FixMemory("row")

    async def body() -> Planner:
        async with running_http(server) as url, ContractToolset(url, memory) as toolset:
            return await episode(toolset, acme.family("governed-partner-growth").draft())

    planner = anyio.run(body)

    retry_text, success_text = planner.shown
    assert json.loads(success_text)["success"] is True
    check_the_model_view(retry_text, success_text)


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

    check_stdio_teaches_and_serves(memory, *anyio.run(body))


def test_a_malformed_meta_contract_is_ignored_and_the_model_still_gets_the_answer(acme):
    memory = FixMemory("row")
    heard: list[MemoryEvent] = []

    async def body() -> Planner:
        async with running_http(scripted_server(acme, declined("garbage"))) as url:
            async with ContractToolset(url, memory, listener=heard.append) as toolset:
                planner = Planner(acme.family("governed-partner-growth").draft())
                with pytest.raises(Exception, match="retries"):
                    await Agent(scripted(planner), toolsets=[toolset], retries=1).run("go")
                return planner

    check_the_model_read_what_the_memory_could_not(anyio.run(body), memory, heard, "garbage")


def test_a_rotation_evicts_the_changed_row_and_restamps_the_rows_it_left_alone(
    server, provider, acme
):
    check_a_rotation_evicts_the_changed_row_and_restamps_the_others(
        PYDANTIC_AI, server, provider, acme
    )


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
