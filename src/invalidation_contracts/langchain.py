"""LangChain / LangGraph: tools built from a ``ContractSession`` (the ``langchain`` extra).

One ``StructuredTool`` per tool of the session, its arguments schema the tool's input schema;
calling it goes through ``ContractSession.hook`` (the relevant fixes patched in, or left to the
model with ``apply="model"``), feeds the memory, and answers the model view. A failing call
raises ``ToolException`` with that view, which LangChain turns into a ``ToolMessage`` with
``status="error"``, so the model reads the suggestions and retries. Each tool's description
carries, at L2, the fixes the model must apply itself (every fix with ``apply="model"``; those the
client cannot patch with ``"client"``): ``contract_tools`` writes it before it yields the tools
and every call rewrites it (``show_fixes``), so a model bound to the tools afterwards reads it.
Adoption on top of LangGraph's example::

    async with contract_tools(url, memory) as tools:
        agent = create_react_agent(model, tools)

``load_contract_tools(contract)`` builds them on a session already entered.
langchain-mcp-adapters is not used: its releases pin ``mcp<2`` (docs/decisions.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any, Unpack

from ._extras import missing

try:
    from langchain_core.tools import StructuredTool, ToolException
except ModuleNotFoundError as exc:
    raise missing(exc, "langchain", mcp="mcp") from exc

from .client.memory import FixMemory
from .mcp.options import SessionKwargs, SessionOptions, session_and_sdk
from .mcp.session import ContractSession, ServerTarget, connect

__all__ = ["contract_tools", "load_contract_tools", "show_fixes"]


def load_contract_tools(contract: ContractSession) -> list[StructuredTool]:
    """A LangChain tool for each tool of ``contract`` (an entered session), in name order;
    ``await show_fixes(contract, tools)`` puts the fixes the model must apply in their
    descriptions."""
    return [_tool(contract, name) for name in sorted(contract.tools)]


async def show_fixes(contract: ContractSession, tools: list[StructuredTool]) -> None:
    """Rewrite each tool's description: the server's, then the fixes the model must apply
    itself at L2 (``AgentCalls.tool_prompt``)."""
    for tool in tools:
        spec = contract.tools.get(tool.name)
        if spec is not None:
            await _describe(contract, tool, spec.description or tool.name)


async def _describe(contract: ContractSession, tool: StructuredTool, base: str) -> None:
    prompt = await contract.tool_prompt(tool.name)
    tool.description = f"{base}\n\n{prompt}" if prompt else base


@contextlib.asynccontextmanager
async def contract_tools(
    server: ServerTarget,
    memory: FixMemory,
    options: SessionOptions | None = None,
    *,
    sdk: Mapping[str, Any] | None = None,
    **session: Unpack[SessionKwargs],
) -> AsyncIterator[list[StructuredTool]]:
    """Connect to ``server`` (as ``mcp.connect``: a URL, ``StdioServerParameters``, ...) with
    ``memory`` and yield its tools; ``options`` (or ``SessionOptions``' names as keywords:
    ``apply``, ``watch_listener``, ...) configure the session, ``sdk`` holds the MCP SDK
    ``Client``'s keywords (as ``connect``)."""
    chosen, client = session_and_sdk("contract_tools", options, session, sdk)
    async with connect(server, memory, chosen, sdk=client) as contract:
        tools = load_contract_tools(contract)
        await show_fixes(contract, tools)
        yield tools


def _tool(contract: ContractSession, name: str) -> StructuredTool:
    spec = contract.tools[name]
    base = spec.description or name

    async def call(**arguments: object) -> str:
        text, is_error = await contract.hook(name, arguments)
        await _describe(contract, tool, base)  # what this call taught, for the next binding
        if is_error:
            raise ToolException(text)
        return text

    tool = StructuredTool(
        name=name,
        description=base,
        args_schema=dict(spec.input_schema),
        coroutine=call,
        handle_tool_error=True,
    )
    return tool
