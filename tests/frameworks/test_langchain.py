"""LangChain / LangGraph: tools built from a ``ContractSession`` serve LangGraph's prebuilt
ReAct agent, driven by a scripted LangChain chat model, real tool calls to a real MCP server."""

from __future__ import annotations

import contextlib
import itertools
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

pytest.importorskip("langchain_core")
pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langgraph.errors import GraphRecursionError  # noqa: E402
from langgraph.prebuilt import create_react_agent  # noqa: E402

from invalidation_contracts.client import FixMemory  # noqa: E402
from invalidation_contracts.client.events import (  # noqa: E402
    MemoryEvent,
)
from invalidation_contracts.langchain import contract_tools, load_contract_tools  # noqa: E402
from invalidation_contracts.mcp import connect  # noqa: E402
from invalidation_contracts.mcp.serve import running_http  # noqa: E402

pytestmark = [
    pytest.mark.frameworks,
    pytest.mark.mcp,
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]
_ids = itertools.count(1)


class Scripted(GenericFakeChatModel):
    """LangChain's fake chat model, playing a planner that reads the tool messages' text."""

    planner: Any = None
    tools: Any = ()

    def bind_tools(self, tools: Any, **kwargs: Any) -> Scripted:
        self.tools = tools  # the model reads their descriptions when it drafts a call
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        planner: Planner = self.planner
        last = messages[-1]
        if not isinstance(last, ToolMessage):
            shown = "\n".join(tool.description for tool in self.tools)
            message = self._call(planner.first(shown))
        elif last.status == "error":
            message = self._call(planner.retry(str(last.content)))
        else:
            planner.shown.append(str(last.content))
            message = AIMessage(content="done")
        return ChatResult(generations=[ChatGeneration(message=message)])

    @staticmethod
    def _call(arguments: dict[str, Any]) -> AIMessage:
        call = {"name": TOOL, "args": arguments, "id": f"call_{next(_ids)}", "type": "tool_call"}
        return AIMessage(content="", tool_calls=[call])


async def episode(tools: list[Any], draft: dict[str, Any]) -> Planner:
    planner = Planner(draft)
    agent = create_react_agent(Scripted(messages=iter(()), planner=planner), tools)
    await agent.ainvoke({"messages": [("user", "subscribe the customer")]})
    return planner


LANGCHAIN = Framework(over_session(load_contract_tools), episode)


def test_a_fix_learned_in_one_run_is_applied_in_the_next_and_dropped_after_a_rotation(
    server, provider, acme
):
    check_a_fix_is_reused_then_dropped_after_a_rotation_and_learned_again(
        LANGCHAIN, server, provider, acme
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
        LANGCHAIN, server, provider, acme
    )


@pytest.mark.parametrize("contract", [["a", "list"], None], ids=["malformed-meta", "no-problem"])
def test_a_result_the_memory_cannot_read_still_reaches_the_model(acme, contract):
    memory = FixMemory("row")
    heard: list[MemoryEvent] = []

    async def body() -> Planner:
        server = scripted_server(acme, declined(contract))
        async with connect(server, memory, listener=heard.append) as session:
            planner = Planner(acme.family("governed-partner-growth").draft())
            model = Scripted(messages=iter(()), planner=planner)
            agent = create_react_agent(model, load_contract_tools(session))
            with contextlib.suppress(GraphRecursionError):  # the model keeps retrying
                await agent.ainvoke({"messages": [("user", "go")]}, {"recursion_limit": 4})
            return planner

    check_the_model_read_what_the_memory_could_not(anyio.run(body), memory, heard, contract)


def _fresh(url: str, memory: FixMemory, apply: str, listener: Listener) -> Any:
    """LangChain's tools loaded afresh for one run."""
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


def test_a_call_rewrites_the_description_so_tools_bound_earlier_show_what_it_taught(server, acme):
    growth = acme.family("governed-partner-growth").draft()

    async def body() -> tuple[str, str]:
        async with running_http(server) as url:
            async with contract_tools(url, FixMemory("row"), apply="model") as tools:
                (tool,) = tools
                before = tool.description
                await episode(tools, growth)
                return before, tool.description

    before, after = anyio.run(body)

    assert "SUMMERSALE25" not in before and "SUMMERSALE25" in after
