"""Google ADK: a toolset built from a ``ContractSession`` (the ``adk`` extra).

``ContractMcpToolset`` is an ADK ``BaseToolset`` holding one ``BaseTool`` per tool of the session,
declared with the tool's input schema. Calling one goes through ``ContractSession.answer``: the
relevant fixes are patched into the model's arguments (``apply="client"``, the default;
``"model"`` sends them as the model wrote them), the result feeds the memory, and ADK is handed
the model view as a ``CallToolResult`` dict (``content``, ``structuredContent``, ``isError``:
what ADK's own ``McpTool`` returns for any MCP result), so a rejection reaches the model with its
suggestions. Each tool's description carries, at L2, the fixes the model must apply itself
(every fix with ``"model"``; those the client cannot patch with ``"client"``): ADK asks the
toolset for its tools on every model request (``get_tools``), which renders them then.
Adoption on top of ADK's example::

    async with contract_toolset(url, memory) as toolset:
        agent = LlmAgent(name="billing", model=model, tools=[toolset])

``ContractMcpToolset(contract)`` builds it on a session already entered. ADK's ``McpToolset`` is
not the seam: it opens its sessions in tasks of its own, pooled per header set and reopened at
will, so no contract session (one confirmed connection, one watcher) can be bound to them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any, Unpack

from ._extras import missing

try:
    import mcp  # noqa: F401  (the session's SDK: named first when it is the one missing)
    from google.adk.agents.readonly_context import ReadonlyContext
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.base_toolset import BaseToolset, ToolPredicate
    from google.adk.tools.tool_context import ToolContext
    from google.genai import types as genai
except ModuleNotFoundError as exc:
    raise missing(exc, "adk", mcp="mcp") from exc

from .client.memory import FixMemory
from .mcp.options import SessionKwargs, SessionOptions, session_and_sdk
from .mcp.session import ContractSession, ServerTarget, connect

__all__ = ["ContractMcpToolset", "ContractTool", "contract_toolset"]


class ContractTool(BaseTool):
    """One MCP tool of ``contract`` as an ADK tool: declared with its input schema, called
    through the contract session."""

    def __init__(self, contract: ContractSession, name: str) -> None:
        spec = contract.tools[name]
        self.base_description = spec.description or name
        """The server's description (``description`` adds the fixes shown to the model)."""
        super().__init__(name=name, description=self.base_description)
        self.contract = contract
        self._schema = dict(spec.input_schema)

    def _get_declaration(self) -> genai.FunctionDeclaration:
        return genai.FunctionDeclaration(
            name=self.name, description=self.description, parameters_json_schema=self._schema
        )

    async def run_async(self, *, args: dict[str, Any], tool_context: ToolContext) -> dict[str, Any]:
        """The call through the contract session; the model view as ADK's ``McpTool`` returns a
        result (the ``CallToolResult`` dumped by its wire names, without 2.x's ``resultType``)."""
        reply = await self.contract.answer(self.name, args)
        shown = reply.to_call_tool_result()
        result = shown.model_dump(mode="json", by_alias=True, exclude_none=True)
        result.pop("resultType", None)
        return result

    async def show_fixes(self) -> None:
        """Rewrite the description: the server's, then the fixes the model must apply itself at
        L2 (``AgentCalls.tool_prompt``)."""
        prompt = await self.contract.tool_prompt(self.name)
        self.description = (
            f"{self.base_description}\n\n{prompt}" if prompt else self.base_description
        )


class ContractMcpToolset(BaseToolset):
    """ADK's toolset for the tools of ``contract`` (an entered ``ContractSession``), in name
    order; ``tool_filter`` and ``tool_name_prefix`` as for any ADK toolset. The session is the
    caller's: ``close`` leaves it open (``contract_toolset`` closes the one it opened)."""

    def __init__(
        self,
        contract: ContractSession,
        *,
        tool_filter: ToolPredicate | list[str] | None = None,
        tool_name_prefix: str | None = None,
    ) -> None:
        super().__init__(tool_filter=tool_filter, tool_name_prefix=tool_name_prefix)
        self.contract = contract
        self.tools = [ContractTool(contract, name) for name in sorted(contract.tools)]

    async def get_tools(self, readonly_context: ReadonlyContext | None = None) -> list[BaseTool]:
        """The selected tools, each description rendered with the fixes the model must apply
        now (ADK asks on every model request)."""
        chosen: list[BaseTool] = []
        for tool in self.tools:
            if self._is_tool_selected(tool, readonly_context):
                await tool.show_fixes()
                chosen.append(tool)
        return chosen

    async def close(self) -> None:
        """Nothing to release: the contract session is the caller's."""


@contextlib.asynccontextmanager
async def contract_toolset(
    server: ServerTarget,
    memory: FixMemory,
    options: SessionOptions | None = None,
    *,
    sdk: Mapping[str, Any] | None = None,
    **session: Unpack[SessionKwargs],
) -> AsyncIterator[ContractMcpToolset]:
    """Connect to ``server`` (as ``mcp.connect``: a URL, ``StdioServerParameters``, ...) with
    ``memory`` and yield its toolset; ``options`` (or ``SessionOptions``' names as keywords:
    ``apply``, ``watch_listener``, ...) configure the session, ``sdk`` holds the MCP SDK
    ``Client``'s keywords (as ``connect``)."""
    chosen, client = session_and_sdk("contract_toolset", options, session, sdk)
    async with connect(server, memory, chosen, sdk=client) as contract:
        yield ContractMcpToolset(contract)
