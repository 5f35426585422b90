"""OpenAI Agents SDK: MCP server classes whose tool results feed a fix memory (the
``openai-agents`` extra).

``ContractMCPServerStdio`` and ``ContractMCPServerStreamableHttp`` are the SDK's own
``MCPServerStdio`` / ``MCPServerStreamableHttp`` taking ``memory=``, so adoption is one argument
on top of the framework's example::

    async with ContractMCPServerStreamableHttp({"url": url}, memory=memory) as server:
        agent = Agent(name="billing", model=model, mcp_servers=[server])

The SDK class's own keywords go in ``sdk={"cache_tools_list": True, ...}``, the contract
session's as ``options=SessionOptions(...)`` or keywords (``apply="model"``, typed).

Each binds a ``ContractSession`` to the session the SDK opens on ``connect`` and routes every
``call_tool`` through it (``ContractSession.answer``): the relevant fixes are patched into the
model's arguments (``apply="client"``, the default; ``"model"`` sends them as the model wrote
them), each tool's description the SDK lists carries, at L2, the fixes the model must apply itself
(every fix with ``"model"``; those the client cannot patch with ``"client"``); the result feeds
the memory, and the SDK is handed the model view as a ``CallToolResult``
(``ToolReply.to_call_tool_result``), which it shows the model as it shows any tool result.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Generic, TypeVar, Unpack

from ._extras import missing

try:
    import mcp_types as types
    from agents.mcp import (
        MCPServerStdio,
        MCPServerStdioParams,
        MCPServerStreamableHttp,
        MCPServerStreamableHttpParams,
    )
    from mcp import StdioServerParameters
    from mcp.client.session import ClientSession
except ModuleNotFoundError as exc:
    raise missing(exc, "openai-agents", mcp="mcp") from exc

from .client.memory import FixMemory
from .mcp.options import SessionKwargs, SessionOptions, session_and_sdk
from .mcp.origins import target_origin
from .mcp.session import ContractSession, message_handler

__all__ = ["ContractMCPServerStdio", "ContractMCPServerStreamableHttp", "ContractServer"]


_Params = TypeVar("_Params", MCPServerStdioParams, MCPServerStreamableHttpParams)
"""The SDK server class's parameters (a ``TypedDict``)."""


class ContractServer(Generic[_Params]):
    """What both server classes add to the SDK's: the memory, the contract session bound on
    ``connect`` and closed on ``cleanup``, and ``call_tool`` through it."""

    session: ClientSession | None
    memory: FixMemory
    contract: ContractSession | None
    _sdk: ClassVar[type[Any]]
    """The SDK's server class this one extends (its ``connect`` and ``cleanup`` run first/last)."""

    def __init__(
        self,
        params: _Params,
        *,
        memory: FixMemory,
        options: SessionOptions | None = None,
        sdk: Mapping[str, Any] | None = None,
        **session: Unpack[SessionKwargs],
    ) -> None:
        chosen, sdk_options = session_and_sdk(type(self).__name__, options, session, sdk)
        origin = chosen.origin or self._origin_of(params)
        if not origin:
            raise ValueError(
                f"{type(self).__name__} cannot tell which server it talks to (no url, no "
                "command): pass origin=, e.g. origin=target_origin(url) (mcp.origins)"
            )
        sdk_options["message_handler"] = message_handler(
            lambda: self.contract, sdk_options.get("message_handler")
        )
        self._sdk.__init__(self, params, **sdk_options)
        self.memory = memory
        self.contract = None
        self.session_options = chosen.but(origin=origin)

    @staticmethod
    def _origin_of(params: _Params) -> str | None:
        """The origin fixes are kept under when none is given (``mcp.origins``)."""
        raise NotImplementedError

    async def connect(self) -> None:
        await self._sdk.connect(self)
        await self._open_contract()

    async def cleanup(self) -> None:
        await self._close_contract()
        await self._sdk.cleanup(self)

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> list[types.Tool]:
        """The SDK's tool list, each description followed by the fixes the model must apply
        itself at L2 (``AgentCalls.tool_prompt``: every fix in model apply mode, those the
        client cannot patch in client mode); the SDK lists tools on every run."""
        listed: list[types.Tool] = await self._sdk.list_tools(self, run_context, agent)
        if self.contract is None:
            return listed
        shown = []
        for tool in listed:
            prompt = await self.contract.tool_prompt(tool.name)
            if prompt:
                text = f"{tool.description}\n\n{prompt}" if tool.description else prompt
                tool = tool.model_copy(update={"description": text})
            shown.append(tool)
        return shown

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None = None
    ) -> types.CallToolResult:
        return await self._contract_call(tool_name, arguments, meta)

    async def _open_contract(self) -> None:
        if self.session is None:
            raise RuntimeError("the SDK's connect opened no session")
        contract = ContractSession(self.session, self.memory, self.session_options)
        await contract.__aenter__()
        self.contract = contract

    async def _close_contract(self) -> None:
        contract, self.contract = self.contract, None
        if contract is not None:
            await contract.__aexit__(None, None, None)

    async def _contract_call(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: dict[str, Any] | None
    ) -> types.CallToolResult:
        if self.contract is None:
            raise RuntimeError("the server is not connected: call connect() first")
        # The SDK's request _meta (tool_meta_resolver, static tool meta) goes out beside the
        # contract's position.
        reply = await self.contract.answer(tool_name, arguments, meta=meta)
        return reply.to_call_tool_result()


class ContractMCPServerStreamableHttp(
    ContractServer[MCPServerStreamableHttpParams], MCPServerStreamableHttp
):
    """``MCPServerStreamableHttp`` bound to ``memory``; ``options`` (or ``SessionOptions``' names
    as keywords): the contract session's, the origin defaulting to the URL's (``mcp.origins``);
    ``sdk``: the SDK class's own keywords (``{"cache_tools_list": True, ...}``)."""

    _sdk = MCPServerStreamableHttp

    @staticmethod
    def _origin_of(params: MCPServerStreamableHttpParams) -> str | None:
        return target_origin(str(params.get("url", "")))


class ContractMCPServerStdio(ContractServer[MCPServerStdioParams], MCPServerStdio):
    """``MCPServerStdio`` bound to ``memory`` (options as ``ContractMCPServerStreamableHttp``;
    the origin defaults to the command line's)."""

    _sdk = MCPServerStdio

    @staticmethod
    def _origin_of(params: MCPServerStdioParams) -> str | None:
        if not params.get("command"):
            return None
        line = StdioServerParameters(
            command=params["command"],
            args=list(params.get("args") or ()),
            cwd=params.get("cwd"),
        )
        return target_origin(line)
