"""The harness through an agent framework: each attempt is one run of the framework's own agent.

``transport="pydantic-ai"``, ``"openai-agents"`` or ``"langchain"`` puts the framework between the
harness and ``serve-mcp`` (a child process over streamable HTTP, ``mcp_channel.mcp_provider``):
the framework opens the MCP session through the shipped integration (``ContractToolset``,
``ContractMCPServerStreamableHttp``, ``contract_tools``), which binds the run's memory to it. Each
attempt is one run of the framework's agent, driven by the framework's own deterministic test
model (PydanticAI ``FunctionModel``, an Agents SDK ``Model``, a LangChain fake chat model): it
calls the domain tool with the arguments the harness planner planned (``simulated:exact`` applies
every fix it is shown: the run stays labelled simulated), the call goes through the integration's
hook (``apply="model"``: the planner applied the fixes, as the ``planner`` apply mode of the arms),
and the model reads back what the framework shows it. The memory's events reach the episode loop
through the integration's ``listener``; the raw reply (for the oracle and the wire cost) through
``ContractSession.reply_listener``. Between episodes the drift driver and the settling are those
of the MCP channel: the framework is only in the agent's path.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import httpx

from ..client.events import MemoryEvent
from ..client.memory import FixMemory
from ..client.modelview import model_text, model_view
from ..domains.catalog import DomainCatalog
from ..mcp.options import SessionOptions
from ..mcp.reply import ToolReply
from ..mcp.session import ContractSession
from ..protocol.levels import Level
from .channels import FRAMEWORK_TRANSPORTS, Listener, Outgoing, Reply
from .errors import HarnessError
from .mcp_channel import McpChannel, mcp_provider, tool_reply, tools_of

#: The frameworks a run can go through (each is also the name of the extra it needs).
FRAMEWORKS = FRAMEWORK_TRANSPORTS
#: What the framework's agent is asked each attempt (its model does not read it).
TASK = "Make the planned request."

Relay = Callable[[str, dict[str, Any]], Awaitable[str]]
"""One run of the framework's agent: its model calls ``tool`` with the arguments; returns the text
the framework showed the model for the result."""


class FrameworkChannel(McpChannel):
    """The domain tool through a framework's agent run; needs and settling as ``McpChannel``."""

    def __init__(
        self, contract: ContractSession, tools: Mapping[str, str], relay: Relay, events: _Events
    ) -> None:
        super().__init__(contract, tools, notifications=False)
        self.relay = relay
        self.events = events
        self.shown: list[str] = []
        """What the framework showed its model for each call, in order."""

    async def send(self, outgoing: Outgoing) -> Reply:
        replies: list[ToolReply] = []
        self.contract.reply_listener = replies.append
        self.events.current = outgoing.listener
        try:
            shown = await self.relay(self.operation(outgoing.route), outgoing.request)
        finally:
            self.events.current = None
            self.contract.reply_listener = None
        if len(replies) != 1:
            raise HarnessError(f"the framework made {len(replies)} tool calls for one attempt")
        (reply,) = replies
        if reply.body and not _same(shown, reply.body):
            raise HarnessError("the framework showed its model something else than the model view")
        self.shown.append(shown)
        return tool_reply(reply)


class _Events:
    """The integration's listener: each event goes to the listener of the call in progress."""

    def __init__(self) -> None:
        self.current: Listener | None = None

    def __call__(self, event: MemoryEvent) -> None:
        if self.current is not None:
            self.current(event)


@contextlib.asynccontextmanager
async def framework_agent(
    framework: str,
    catalog: DomainCatalog,
    memory: FixMemory,
    *,
    level: Level,
    token: str,
    conditional: bool,
    domain: str | None = None,
) -> AsyncIterator[tuple[FrameworkChannel, str, httpx.AsyncClient]]:
    """The channel through ``framework``, the origin its memory entries are keyed by, and the
    operator's client (``domain``: as ``mcp_provider``)."""
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {', '.join(FRAMEWORKS)}, not {framework!r}")
    events = _Events()
    provider = mcp_provider(catalog, level=level, token=token, wire="http", domain=domain)
    async with provider as (url, admin):
        # The planner applied the fixes (``apply="model"``); the run chooses ``conditional``.
        options = SessionOptions(
            apply="model", watch=False, listener=events, conditional=conditional
        )
        opened = _OPENERS[framework](url, memory, options)
        async with opened as (contract, relay):
            channel = FrameworkChannel(contract, tools_of(contract, catalog), relay, events)
            yield channel, contract.origin, admin


Opener = Callable[
    [str, FixMemory, SessionOptions],
    contextlib.AbstractAsyncContextManager[tuple[ContractSession, Relay]],
]


@contextlib.asynccontextmanager
async def _pydantic_ai(
    url: str, memory: FixMemory, options: SessionOptions
) -> AsyncIterator[tuple[ContractSession, Relay]]:
    from pydantic_ai import Agent
    from pydantic_ai.messages import (
        ModelMessage,
        ModelResponse,
        RetryPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from ..pydantic_ai import ContractToolset

    toolset = ContractToolset(url, memory, options)

    async def relay(tool: str, request: dict[str, Any]) -> str:
        shown: list[str] = []

        def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            last = messages[-1].parts[-1]
            if isinstance(last, RetryPromptPart):
                shown.append(_content(last.content))
            elif isinstance(last, ToolReturnPart):
                shown.append(last.model_response_str(wrap_if_error=False))  # error or not
            else:
                return ModelResponse(parts=[ToolCallPart(tool, request)])
            return ModelResponse(parts=[TextPart("done")])

        await Agent(FunctionModel(respond), toolsets=[toolset], retries=1).run(TASK)
        return _one(shown)

    async with toolset:
        yield _opened(toolset.contract, "PydanticAI"), relay


@contextlib.asynccontextmanager
async def _openai_agents(
    url: str, memory: FixMemory, options: SessionOptions
) -> AsyncIterator[tuple[ContractSession, Relay]]:
    from agents import Agent, Runner, set_tracing_disabled
    from agents.items import ModelResponse, TResponseInputItem
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    from ..openai_agents import ContractMCPServerStreamableHttp

    set_tracing_disabled(True)  # the SDK would export traces to its vendor
    ids = itertools.count(1)

    class Relaying(Model):
        """The SDK's model interface: one call of ``tool``, then reads the tool output."""

        def __init__(self, tool: str, request: dict[str, Any], shown: list[str]) -> None:
            self.tool, self.request, self.shown = tool, request, shown

        async def get_response(
            self,
            system_instructions: str | None,
            input: str | list[TResponseInputItem],
            *a: Any,
            **k: Any,
        ) -> ModelResponse:
            outputs = [
                i for i in input if isinstance(i, dict) and i.get("type") == "function_call_output"
            ]
            if not outputs:
                call = ResponseFunctionToolCall(
                    type="function_call",
                    call_id=f"call_{next(ids)}",
                    name=self.tool,
                    arguments=json.dumps(self.request),
                )
                return ModelResponse(output=[call], usage=Usage(), response_id=None)
            self.shown.append(_output_text(outputs[-1].get("output")))
            done = ResponseOutputMessage(
                id=f"msg_{next(ids)}",
                type="message",
                role="assistant",
                status="completed",
                content=[ResponseOutputText(type="output_text", text="done", annotations=[])],
            )
            return ModelResponse(output=[done], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kw: Any) -> Any:
            raise NotImplementedError("the harness does not stream")

    server = ContractMCPServerStreamableHttp(
        {"url": url, "timeout": 30}, memory=memory, options=options
    )

    async def relay(tool: str, request: dict[str, Any]) -> str:
        shown: list[str] = []
        agent = Agent(name="harness", model=Relaying(tool, request, shown), mcp_servers=[server])
        await Runner.run(agent, TASK, max_turns=3)
        return _one(shown)

    async with server:
        yield _opened(server.contract, "the Agents SDK"), relay


@contextlib.asynccontextmanager
async def _langchain(
    url: str, memory: FixMemory, options: SessionOptions
) -> AsyncIterator[tuple[ContractSession, Relay]]:
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langgraph.prebuilt import create_react_agent

    from ..langchain import load_contract_tools
    from ..mcp.session import connect

    ids = itertools.count(1)

    class Relaying(GenericFakeChatModel):
        """LangChain's fake chat model: one call of the tool, then reads the tool message."""

        tool: str = ""
        request: Any = None
        shown: Any = None
        """Typed ``Any`` so pydantic keeps the caller's list instead of validating a copy."""

        def bind_tools(self, tools: Any, **kwargs: Any) -> Relaying:
            return self

        def _generate(self, messages: list[BaseMessage], *a: Any, **k: Any) -> ChatResult:
            last = messages[-1]
            if isinstance(last, ToolMessage):
                self.shown.append(_content(last.content))
                message = AIMessage(content="done")
            else:
                call = {
                    "name": self.tool,
                    "args": self.request,
                    "id": f"call_{next(ids)}",
                    "type": "tool_call",
                }
                message = AIMessage(content="", tool_calls=[call])
            return ChatResult(generations=[ChatGeneration(message=message)])

    opened = connect(url, memory, options, sdk={"read_timeout_seconds": 30})
    async with opened as contract:
        tools = load_contract_tools(contract)

        async def relay(tool: str, request: dict[str, Any]) -> str:
            shown: list[str] = []
            model = Relaying(messages=iter(()), tool=tool, request=request, shown=shown)
            agent = create_react_agent(model, tools)
            await agent.ainvoke({"messages": [("user", TASK)]})
            return _one(shown)

        yield contract, relay


_OPENERS: dict[str, Opener] = {
    "pydantic-ai": _pydantic_ai,
    "openai-agents": _openai_agents,
    "langchain": _langchain,
}


def _opened(contract: ContractSession | None, framework: str) -> ContractSession:
    """The MCP session the framework's integration opened on entering."""
    if contract is None:
        raise HarnessError(f"{framework} opened no MCP session")
    return contract


def _one(shown: list[str]) -> str:
    if len(shown) != 1:
        raise HarnessError(f"the framework's model was shown {len(shown)} tool results, not 1")
    return shown[0]


def _same(shown: str, body: dict[str, Any]) -> bool:
    """Whether ``shown`` is the model view of ``body`` (as text, or the JSON a framework wrote
    of the value it was handed)."""
    if shown == model_text(body, joined_detail=False):
        return True
    try:
        return bool(json.loads(shown) == model_view(body, joined_detail=False))
    except ValueError:
        return False


def _content(content: object) -> str:
    return content if isinstance(content, str) else json.dumps(content)


def _output_text(output: object) -> str:
    """The text the Agents SDK put in front of the model for a tool's output."""
    if isinstance(output, list):
        return "".join(part.get("text", "") for part in output if isinstance(part, dict))
    return str(output)
