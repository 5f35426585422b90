"""OpenAI Agents SDK: ``ContractMCPServerStreamableHttp`` / ``ContractMCPServerStdio`` serve a
scripted implementation of the SDK's own ``Model`` interface real tool calls to a real MCP
server; the memory learns, reuses, and drops what a rotation made stale."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.server.lowlevel import Server
from tests.frameworks.conftest import PYTHON, SERVE_MCP, TOOL, Planner
from tests.frameworks.driver import (
    Framework,
    Listener,
    check_a_fix_is_reused_then_dropped_after_a_rotation_and_learned_again,
    check_a_rotation_evicts_the_changed_row_and_restamps_the_others,
    check_stdio_teaches_and_serves,
    check_the_model_applied_the_fix_it_read,
    check_the_model_applied_the_unpatchable_fix,
    check_the_model_view,
    declined,
)
from tests.mcp.scripted import scripted_server

pytest.importorskip("agents")

from agents import Agent, Runner, set_tracing_disabled  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from invalidation_contracts.client import FixMemory  # noqa: E402
from invalidation_contracts.client.events import Evicted, MemoryEvent  # noqa: E402
from invalidation_contracts.mcp.serve import running_http  # noqa: E402
from invalidation_contracts.openai_agents import (  # noqa: E402
    ContractMCPServerStdio,
    ContractMCPServerStreamableHttp,
)

pytestmark = [pytest.mark.frameworks, pytest.mark.mcp, pytest.mark.timeout(120)]
set_tracing_disabled(True)  # the SDK would try to export traces to its vendor


def output_text(item: Any) -> str:
    """The text the SDK put in front of the model for a tool's output."""
    output = item.get("output")
    if isinstance(output, list):
        return "".join(part.get("text", "") for part in output if isinstance(part, dict))
    return str(output)


class Scripted(Model):
    """The SDK's model interface playing ``planner``: it reads the tool outputs' text."""

    def __init__(self, planner: Planner) -> None:
        self.planner = planner
        self.calls = 0

    def _call(self, arguments: dict[str, Any]) -> ModelResponse:
        self.calls += 1
        call = ResponseFunctionToolCall(
            type="function_call",
            call_id=f"call_{self.calls}",
            name=TOOL,
            arguments=json.dumps(arguments),
        )
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, tools: Any = (), **kw: Any
    ):
        outputs = [
            i for i in input if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        if not outputs:
            shown = [system_instructions or "", *(tool.description for tool in tools)]
            return self._call(self.planner.first("\n".join(shown)))
        shown = output_text(outputs[-1])
        if '"success": true' not in shown:
            return self._call(self.planner.retry(shown))
        self.planner.shown.append(shown)
        done = ResponseOutputMessage(
            id="msg_1",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(type="output_text", text="done", annotations=[])],
        )
        return ModelResponse(output=[done], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kw: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


async def episode(server: Any, draft: dict[str, Any]) -> Planner:
    planner = Planner(draft)
    agent = Agent(name="billing", model=Scripted(planner), mcp_servers=[server])
    await Runner.run(agent, "subscribe the customer", max_turns=6)
    return planner


@asynccontextmanager
async def _streamable(url: str, memory: FixMemory, listener: Listener) -> AsyncIterator[Any]:
    mcp = ContractMCPServerStreamableHttp({"url": url}, memory=memory, watch_listener=listener)
    async with mcp:
        yield mcp, mcp.contract


AGENTS_SDK = Framework(_streamable, episode)


def test_a_fix_learned_in_one_run_is_applied_in_the_next_and_dropped_after_a_rotation(
    server, provider, acme
):
    check_a_fix_is_reused_then_dropped_after_a_rotation_and_learned_again(
        AGENTS_SDK, server, provider, acme
    )


def test_the_model_is_shown_the_model_view_and_no_contract_metadata(server, acme):
    memory = FixMemory("row")

    async def body() -> Planner:
        async with running_http(server) as url:
            async with ContractMCPServerStreamableHttp({"url": url}, memory=memory) as mcp:
                return await episode(mcp, acme.family("governed-partner-growth").draft())

    failure, success = anyio.run(body).shown
    assert '"success": true' in success
    check_the_model_view(failure, success)


def test_over_stdio_a_serve_mcp_child_teaches_and_serves_a_fix(acme):
    memory = FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()

    async def body() -> list[Planner]:
        params = {"command": PYTHON, "args": SERVE_MCP}
        timeout = {"client_session_timeout_seconds": 60}  # a cold child on a shared machine
        async with ContractMCPServerStdio(params, memory=memory, sdk=timeout) as mcp:
            return [await episode(mcp, growth), await episode(mcp, growth)]

    check_stdio_teaches_and_serves(memory, *anyio.run(body))


def test_a_rotation_evicts_the_changed_row_and_restamps_the_rows_it_left_alone(
    server, provider, acme
):
    check_a_rotation_evicts_the_changed_row_and_restamps_the_others(
        AGENTS_SDK, server, provider, acme
    )


def test_an_error_without_a_problem_document_still_reaches_the_model(acme):
    memory = FixMemory("row")

    async def body() -> Planner:
        async with running_http(scripted_server(acme, declined(None))) as url:
            async with ContractMCPServerStreamableHttp({"url": url}, memory=memory) as mcp:
                planner = Planner(acme.family("governed-partner-growth").draft())
                agent = Agent(name="billing", model=Scripted(planner), mcp_servers=[mcp])
                with pytest.raises(Exception, match="[Mm]ax turns"):
                    await Runner.run(agent, "go", max_turns=2)
                return planner

    planner = anyio.run(body)

    assert planner.shown and "declined: card blocked" in planner.shown[0]
    assert all(memory.entries(origin) == [] for origin in memory.origins())


def test_the_sdks_own_request_meta_goes_out_beside_the_contracts(acme):
    """A ``tool_meta_resolver``'s ``_meta`` reaches the server (the adapter once dropped it)."""
    memory = FixMemory("row")
    sent: list[dict[str, Any]] = []
    tool = types.Tool(name=TOOL, input_schema=acme.route.request_model.model_json_schema())

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        sent.append(params.model_dump(by_alias=True, exclude_none=True).get("_meta") or {})
        text = types.TextContent(type="text", text="declined: card blocked")
        return types.CallToolResult(content=[text], is_error=True)

    async def body() -> None:
        async with running_http(
            Server("recording", on_list_tools=list_tools, on_call_tool=call_tool)
        ) as url:
            options = {"tool_meta_resolver": lambda context: {"app.example/tenant": "t-1"}}
            async with ContractMCPServerStreamableHttp(
                {"url": url}, memory=memory, sdk=options
            ) as mcp:
                planner = Planner(acme.family("governed-partner-growth").draft())
                agent = Agent(name="billing", model=Scripted(planner), mcp_servers=[mcp])
                with pytest.raises(Exception, match="[Mm]ax turns"):
                    await Runner.run(agent, "go", max_turns=2)

    anyio.run(body)

    assert sent and all(meta.get("app.example/tenant") == "t-1" for meta in sent)


def reuse_runs(
    server: Any, draft: dict[str, Any], apply: str, heard: list[MemoryEvent]
) -> list[Planner]:
    """Two runs of ``draft``'s task with ``apply``: one to learn, one to reuse."""
    memory = FixMemory("row")

    async def body() -> list[Planner]:
        async with running_http(server) as url:
            params = {"url": url}
            mcp = ContractMCPServerStreamableHttp(
                params, memory=memory, apply=apply, listener=heard.append
            )
            async with mcp:
                return [await episode(mcp, draft), await episode(mcp, draft)]

    return anyio.run(body)


def test_in_model_mode_the_tool_description_shows_the_fix_and_the_next_run_applies_it(server, acme):
    growth = acme.family("governed-partner-growth").draft()
    heard: list[MemoryEvent] = []

    check_the_model_applied_the_fix_it_read(*reuse_runs(server, growth, "model", heard))


def test_a_fix_on_a_field_not_patchable_is_shown_to_the_model_in_client_mode(server, acme):
    funding = acme.family("funding-enterprise-annual").draft()
    heard: list[MemoryEvent] = []

    check_the_model_applied_the_unpatchable_fix(*reuse_runs(server, funding, "client", heard))
    assert not [e for e in heard if isinstance(e, Evicted)]  # no re-learning churn
