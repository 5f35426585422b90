"""Google ADK: ``ContractMcpToolset`` serves ADK's ``LlmAgent`` under its ``InMemoryRunner``, driven
by a scripted implementation of ADK's own ``BaseLlm``, real tool calls to a real MCP server; the
memory learns, reuses, and drops what a rotation made stale."""

from __future__ import annotations

import functools
import itertools
from collections.abc import AsyncGenerator
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

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent  # noqa: E402
from google.adk.models.base_llm import BaseLlm  # noqa: E402
from google.adk.models.llm_request import LlmRequest  # noqa: E402
from google.adk.models.llm_response import LlmResponse  # noqa: E402
from google.adk.runners import InMemoryRunner  # noqa: E402
from google.genai import types as genai  # noqa: E402

from invalidation_contracts.adk import ContractMcpToolset, contract_toolset  # noqa: E402
from invalidation_contracts.client import FixMemory  # noqa: E402
from invalidation_contracts.client.events import (  # noqa: E402
    MemoryEvent,
)
from invalidation_contracts.mcp import connect  # noqa: E402
from invalidation_contracts.mcp.serve import running_http  # noqa: E402

pytestmark = [
    pytest.mark.frameworks,
    pytest.mark.mcp,
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),  # ADK's experimental-feature notices
]
_ids = itertools.count(1)


def shown_text(response: dict[str, Any]) -> str:
    """What the model reads of a tool's response: the text of its content."""
    content = response.get("content") or ()
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


class Scripted(BaseLlm):
    """ADK's model interface playing ``planner``: it reads the declarations' descriptions and the
    function responses' text."""

    model: str = "scripted"
    planner: Any = None
    rounds: int = 0
    blind: bool = False
    """A model that does not read the tool descriptions (it sends its draft as it is)."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        planner: Planner = self.planner
        self.rounds += 1
        parts = llm_request.contents[-1].parts or []
        answered = [p.function_response for p in parts if p.function_response is not None]
        if not answered:
            shown = "" if self.blind else _descriptions(llm_request)
            yield self._call(planner.first(shown))
            return
        response = answered[-1].response or {}
        text = shown_text(response)
        if response.get("isError"):
            yield self._call(planner.retry(text))
            return
        planner.shown.append(text)
        done = genai.Content(role="model", parts=[genai.Part(text="done")])
        yield LlmResponse(content=done)

    @staticmethod
    def _call(arguments: dict[str, Any]) -> LlmResponse:
        call = genai.FunctionCall(id=f"call_{next(_ids)}", name=TOOL, args=arguments)
        return LlmResponse(
            content=genai.Content(role="model", parts=[genai.Part(function_call=call)])
        )


def _descriptions(request: LlmRequest) -> str:
    tools = request.config.tools if request.config is not None else None
    return "\n".join(
        declaration.description or ""
        for tool in tools or ()
        for declaration in getattr(tool, "function_declarations", None) or ()
    )


async def episode(
    toolset: ContractMcpToolset, draft: dict[str, Any], turns: int = 6, blind: bool = False
) -> Planner:
    """One run of ADK's agent under its runner: the task ``draft``, at most ``turns`` model
    requests."""
    planner = Planner(draft)
    model = Scripted(planner=planner, blind=blind)
    agent = LlmAgent(name="billing", model=model, tools=[toolset])
    runner = InMemoryRunner(agent=agent, app_name="billing")
    session = await runner.session_service.create_session(app_name="billing", user_id="u")
    ask = genai.Content(role="user", parts=[genai.Part(text="subscribe the customer")])
    async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=ask):
        if model.rounds >= turns:
            break
    await runner.close()
    return planner


ADK = Framework(over_session(ContractMcpToolset), episode)


def test_a_fix_learned_in_one_run_is_applied_in_the_next_and_dropped_after_a_rotation(
    server, provider, acme
):
    check_a_fix_is_reused_then_dropped_after_a_rotation_and_learned_again(
        ADK, server, provider, acme
    )


def test_the_model_is_shown_the_model_view_and_no_contract_metadata(server, acme):
    memory = FixMemory("row")

    async def body() -> Planner:
        async with running_http(server) as url, contract_toolset(url, memory) as toolset:
            return await episode(toolset, acme.family("governed-partner-growth").draft())

    failure, success = anyio.run(body).shown
    assert '"success": true' in success
    check_the_model_view(failure, success)


def test_over_stdio_a_serve_mcp_child_teaches_and_serves_a_fix(acme):
    memory = FixMemory("row")
    growth = acme.family("governed-partner-growth").draft()

    async def body() -> list[Planner]:
        params = StdioServerParameters(command=PYTHON, args=SERVE_MCP)
        async with contract_toolset(params, memory) as toolset:
            return [await episode(toolset, growth), await episode(toolset, growth)]

    check_stdio_teaches_and_serves(memory, *anyio.run(body))


def test_a_rotation_evicts_the_changed_row_and_restamps_the_rows_it_left_alone(
    server, provider, acme
):
    check_a_rotation_evicts_the_changed_row_and_restamps_the_others(ADK, server, provider, acme)


@pytest.mark.parametrize("contract", [["a", "list"], None], ids=["malformed-meta", "no-problem"])
def test_a_result_the_memory_cannot_read_still_reaches_the_model(acme, contract):
    memory = FixMemory("row")
    heard: list[MemoryEvent] = []

    async def body() -> Planner:
        server = scripted_server(acme, declined(contract))
        async with connect(server, memory, listener=heard.append) as s:
            return await episode(
                ContractMcpToolset(s), acme.family("governed-partner-growth").draft(), 3
            )

    planner = anyio.run(body)

    assert len(planner.calls) >= 2  # the model read the rejection, retried
    check_the_model_read_what_the_memory_could_not(planner, memory, heard, contract)


def _fresh(url: str, memory: FixMemory, apply: str, listener: Listener) -> Any:
    """ADK's toolset connected afresh for one run."""
    return contract_toolset(url, memory, apply=apply, listener=listener)


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


def test_get_tools_renders_each_description_as_the_memory_stands_then(server, acme):
    growth = acme.family("governed-partner-growth").draft()

    async def body() -> tuple[str, str]:
        async with running_http(server) as url:
            async with contract_toolset(url, FixMemory("row"), apply="model") as toolset:
                (before,) = await toolset.get_tools()
                first = before.description
                await episode(toolset, growth)
                (after,) = await toolset.get_tools()
                return first, after.description

    before, after = anyio.run(body)

    assert "SUMMERSALE25" not in before and "SUMMERSALE25" in after
