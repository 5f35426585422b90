"""LlamaIndex: MCP tools whose results feed a fix memory (the ``llamaindex`` extra).

``ContractToolSpec`` is llama-index-tools-mcp's own ``McpToolSpec`` over an entered
``ContractSession``: its ``FunctionTool`` s (arguments model built from each tool's input schema,
``allowed_tools`` and partial parameters as the framework's) call through
``ContractSession.hook`` (the relevant fixes patched in, or left to the model with
``apply="model"``), feed the memory, and answer the model view. A failing call raises
``ContractToolError`` with that view, which LlamaIndex's agents turn into a tool output with
``is_error=True``, so the model reads the suggestions and retries. Each tool's description
carries, at L2, the fixes the model must apply itself (every fix with ``apply="model"``; those
the client cannot patch with ``"client"``): ``to_tool_list_async`` writes it and every call
rewrites it, and LlamaIndex reads the descriptions on every model request. Adoption on top of
LlamaIndex's example::

    async with contract_tools(url, memory) as tools:
        agent = FunctionAgent(tools=tools, llm=llm)

The contract's own resources are never made tools (``include_resources=True`` lists the others).
``BasicMCPClient`` is not the seam: it opens a new MCP session for every call, so no contract
session (one confirmed connection, one watcher) can be bound to it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any, Unpack

from ._extras import missing

try:
    import mcp_types as types
    from llama_index.core.tools import FunctionTool
    from llama_index.tools.mcp import McpToolSpec
except ModuleNotFoundError as exc:
    raise missing(exc, "llamaindex", mcp="mcp", mcp_types="mcp") from exc

from .client.memory import FixMemory
from .mcp.options import SessionKwargs, SessionOptions, session_and_sdk
from .mcp.proxy.notify import is_contract_uri
from .mcp.session import ContractSession, ServerTarget, connect

__all__ = ["ContractToolError", "ContractToolSpec", "contract_tools"]


class ContractToolError(Exception):
    """A tool call the server rejected; ``str()`` is the model view, suggestions included."""


class ContractToolSpec(McpToolSpec):  # type: ignore[misc]
    """``McpToolSpec`` over ``contract`` (an entered ``ContractSession``), with
    ``McpToolSpec``'s own options: ``allowed_tools``, the partial parameters, and
    ``include_resources`` (the contract's own resources never listed)."""

    def __init__(
        self,
        contract: ContractSession,
        *,
        allowed_tools: list[str] | None = None,
        global_partial_params: dict[str, Any] | None = None,
        partial_params_by_tool: dict[str, dict[str, Any]] | None = None,
        include_resources: bool = False,
    ) -> None:
        super().__init__(
            contract.session,
            allowed_tools=allowed_tools,
            global_partial_params=global_partial_params,
            partial_params_by_tool=partial_params_by_tool,
            include_resources=include_resources,
        )
        self.contract = contract
        self._built: dict[str, FunctionTool] = {}

    async def fetch_tools(self) -> list[types.Tool]:
        """The session's tools (listed once, on entering), in name order, as ``allowed_tools``
        selects them."""
        listed = [self.contract.tools[name] for name in sorted(self.contract.tools)]
        allowed = self.allowed_tools
        return listed if allowed is None else [t for t in listed if t.name in allowed]

    async def fetch_resources(self) -> list[types.Resource | types.ResourceTemplate]:
        """The server's resources but the contract's (the model is never shown the contract)."""
        listed = await super().fetch_resources()
        return [r for r in listed if not is_contract_uri(_uri(r))]

    def _create_tool_fn(self, tool_name: str) -> Callable[..., Coroutine[Any, Any, str]]:
        """The ``FunctionTool``'s function: the call through the contract session."""
        contract = self.contract

        async def call(**arguments: object) -> str:
            text, is_error = await contract.hook(tool_name, arguments)
            tool = self._built.get(tool_name)
            if tool is not None:  # what this call taught, for the next model request
                await _describe(contract, tool)
            if is_error:
                raise ContractToolError(text)
            return text

        return call

    async def to_tool_list_async(self) -> list[FunctionTool]:
        """The framework's ``FunctionTool`` s, each description followed by the fixes the model
        must apply itself at L2 (``AgentCalls.tool_prompt``)."""
        tools: list[FunctionTool] = await super().to_tool_list_async()
        for tool in tools:
            if tool.metadata.name in self.contract.tools:
                self._built[str(tool.metadata.name)] = tool
                await _describe(self.contract, tool)
        return tools


def _uri(resource: types.Resource | types.ResourceTemplate) -> str:
    if isinstance(resource, types.Resource):
        return str(resource.uri)
    return str(resource.uri_template)


async def _describe(contract: ContractSession, tool: FunctionTool) -> None:
    name = str(tool.metadata.name)
    base = contract.tools[name].description or name
    prompt = await contract.tool_prompt(name)
    tool.metadata.description = f"{base}\n\n{prompt}" if prompt else base


@contextlib.asynccontextmanager
async def contract_tools(
    server: ServerTarget,
    memory: FixMemory,
    options: SessionOptions | None = None,
    *,
    sdk: Mapping[str, Any] | None = None,
    **session: Unpack[SessionKwargs],
) -> AsyncIterator[list[FunctionTool]]:
    """Connect to ``server`` (as ``mcp.connect``: a URL, ``StdioServerParameters``, ...) with
    ``memory`` and yield its tools; ``options`` (or ``SessionOptions``' names as keywords:
    ``apply``, ``watch_listener``, ...) configure the session, ``sdk`` holds the MCP SDK
    ``Client``'s keywords (as ``connect``)."""
    chosen, client = session_and_sdk("contract_tools", options, session, sdk)
    async with connect(server, memory, chosen, sdk=client) as contract:
        yield await ContractToolSpec(contract).to_tool_list_async()
