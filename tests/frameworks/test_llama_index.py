"""LlamaIndex: ``ContractToolSpec``'s tools serve LlamaIndex's ``FunctionAgent``, driven by
LlamaIndex's own ``MockFunctionCallingLLM`` playing a scripted planner, real tool calls to a real
MCP server; the memory learns, reuses, and drops what a rotation made stale."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from mcp import StdioServerParameters
from tests.frameworks.conftest import PYTHON, SERVE_MCP, TOOL, Planner
from tests.frameworks.driver import (
    Framework,
    Listener,
    check_a_fix_is_reused_then_dropped_after_a_rotation_and_learned_again,
    check_a_rotation_evicts_the_changed_row_and_restamps_the_others,
    check_an_unpatchable_fix_unread_is_a_patch_skipped_event,
    check_stdio_teaches_and_serves,
    check_the_model_applied_the_fix_it_read,
    check_the_model_applied_the_unpatchable_fix,
    check_the_model_read_what_the_memory_could_not,
    check_the_model_view,
    declined,
    over_session,
    reuse_runs,
)
from tests.mcp.scripted import scripted_server

pytest.importorskip("llama_index.core")
pytest.importorskip("llama_index.tools.mcp")

from llama_index.core.agent.workflow import FunctionAgent  # noqa: E402
from llama_index.core.base.llms.types import (  # noqa: E402
    ChatMessage,
    MessageRole,
    ToolCallBlock,
)
from llama_index.core.llms.mock import MockFunctionCallingLLM  # noqa: E402
from llama_index.core.tools import FunctionTool  # noqa: E402
from workflows.errors import WorkflowRuntimeError  # noqa: E402

from invalidation_contracts.client import FixMemory  # noqa: E402
from invalidation_contracts.client.events import (  # noqa: E402
    MemoryEvent,
)
from invalidation_contracts.llama_index import (  # noqa: E402
    ContractToolError,
    ContractToolSpec,
    contract_tools,
)
from invalidation_contracts.mcp import connect  # noqa: E402
from invalidation_contracts.mcp.serve import running_http  # noqa: E402

pytestmark = [
    pytest.mark.frameworks,
    pytest.mark.mcp,
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]
_ids = itertools.count(1)


def scripted(planner: Planner, blind: bool = False) -> MockFunctionCallingLLM:
    """LlamaIndex's mock function-calling LLM playing ``planner``: it reads the tools'
    descriptions (unless ``blind``) and the tool messages' text."""

    def respond(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        last = messages[-1]
        if last.role != MessageRole.TOOL:
            tools = kwargs.get("tools") or ()
            shown = "" if blind else "\n".join(t.metadata.description for t in tools)
            return call(planner.first(shown))
        text = str(last.content)
        if '"success": true' not in text:
            return call(planner.retry(text))
        planner.shown.append(text)
        return ChatMessage(role=MessageRole.ASSISTANT, content="done")

    return MockFunctionCallingLLM(response_generator=respond)


def call(arguments: dict[str, Any]) -> ChatMessage:
    block = ToolCallBlock(tool_call_id=f"call_{next(_ids)}", tool_name=TOOL, tool_kwargs=arguments)
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block])


async def episode(
    tools: list[FunctionTool], draft: dict[str, Any], turns: int = 6, blind: bool = False
) -> Planner:
    """One run of LlamaIndex's ``FunctionAgent``: the task ``draft``, at most ``turns`` steps."""
    planner = Planner(draft)
    agent = FunctionAgent(tools=tools, llm=scripted(planner, blind))
    await agent.run(user_msg="subscribe the customer", max_iterations=turns)
    return planner


async def _spec_tools(contract: Any) -> list[FunctionTool]:
    return await ContractToolSpec(contract).to_tool_list_async()


LLAMA_INDEX = Framework(over_session(_spec_tools), episode)


def test_a_fix_learned_in_one_run_is_applied_in_the_next_and_dropped_after_a_rotation(
    server, provider, acme
):
    check_a_fix_is_reused_then_dropped_after_a_rotation_and_learned_again(
        LLAMA_INDEX, server, provider, acme
    )


def test_the_model_is_shown_the_model_view_and_no_contract_metadata(server, acme):
    memory = FixMemory("row")

    async def body() -> Planner:
        async with running_http(server) as url, contract_tools(url, memory) as tools:
            return await episode(tools, acme.family("governed-partner-growth").draft())

    failure, success = anyio.run(body).shown
    assert '"success": true' in success
    check_the_model_view(failure, success)


def test_over_stdio_a_serve_mcp_child_teaches_and_serves_a_fix(acme):
    memory = FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()

    async def body() -> list[Planner]:
        params = StdioServerParameters(command=PYTHON, args=SERVE_MCP)
        async with contract_tools(params, memory) as tools:
            return [await episode(tools, growth), await episode(tools, growth)]

    check_stdio_teaches_and_serves(memory, *anyio.run(body))


def test_a_rotation_evicts_the_changed_row_and_restamps_the_rows_it_left_alone(
    server, provider, acme
):
    check_a_rotation_evicts_the_changed_row_and_restamps_the_others(
        LLAMA_INDEX, server, provider, acme
    )


@pytest.mark.parametrize("contract", [["a", "list"], None], ids=["malformed-meta", "no-problem"])
def test_a_result_the_memory_cannot_read_still_reaches_the_model(acme, contract):
    memory = FixMemory("row")
    heard: list[MemoryEvent] = []
    planner = Planner(acme.family("governed-partner-growth").draft())

    async def body() -> None:
        server = scripted_server(acme, declined(contract))
        async with connect(server, memory, listener=heard.append) as s:
            agent = FunctionAgent(
                tools=await ContractToolSpec(s).to_tool_list_async(), llm=scripted(planner)
            )
            with pytest.raises(WorkflowRuntimeError):  # the model keeps retrying
                await agent.run(user_msg="go", max_iterations=3)

    anyio.run(body)

    check_the_model_read_what_the_memory_could_not(planner, memory, heard, contract)


def test_a_rejected_call_raises_contract_tool_error_carrying_the_model_view(server, acme):
    async def body() -> str:
        async with running_http(server) as url, contract_tools(url, FixMemory("row")) as tools:
            (tool,) = tools
            with pytest.raises(ContractToolError) as raised:
                await tool.acall(**acme.family("governed-partner-growth").draft())
            return str(raised.value)

    shown = anyio.run(body)

    assert "SUMMERSALE25" in shown and "table_versions" not in shown


def test_the_contracts_resources_are_never_made_tools(server):
    async def body() -> list[str]:
        async with connect(server, FixMemory("row")) as contract:
            spec = ContractToolSpec(contract, include_resources=True)
            return [str(tool.metadata.name) for tool in await spec.to_tool_list_async()]

    assert anyio.run(body) == [TOOL]


def _fresh(url: str, memory: FixMemory, apply: str, listener: Listener) -> Any:
    """LlamaIndex's tools loaded afresh for one run."""
    return contract_tools(url, memory, apply=apply, listener=listener)


def test_in_model_mode_the_tool_description_shows_the_fix_and_the_next_run_applies_it(server, acme):
    growth = acme.family("governed-partner-growth").draft()

    check_the_model_applied_the_fix_it_read(
        *reuse_runs(_fresh, episode, server, growth, "model", [])
    )


def test_a_fix_on_a_field_not_patchable_is_shown_to_the_model_in_client_mode(server, acme):
    funding = acme.family("funding-enterprise-annual").draft()

    check_the_model_applied_the_unpatchable_fix(
        *reuse_runs(_fresh, episode, server, funding, "client", [])
    )


def test_a_fix_the_client_cannot_patch_into_a_call_is_a_patch_skipped_event(server, acme):
    funding = acme.family("funding-enterprise-annual").draft()
    heard: list[MemoryEvent] = []

    blind = functools.partial(episode, blind=True)
    learn, reuse = reuse_runs(_fresh, blind, server, funding, "client", heard)

    check_an_unpatchable_fix_unread_is_a_patch_skipped_event(learn, reuse, heard)


def test_a_call_rewrites_the_description_so_the_next_model_request_shows_what_it_taught(
    server, acme
):
    growth = acme.family("governed-partner-growth").draft()

    async def body() -> tuple[str, str]:
        async with running_http(server) as url:
            async with contract_tools(url, FixMemory("row"), apply="model") as tools:
                (tool,) = tools
                before = tool.metadata.description
                await episode(tools, growth)
                return before, tool.metadata.description

    before, after = anyio.run(body)

    assert "SUMMERSALE25" not in before and "SUMMERSALE25" in after
