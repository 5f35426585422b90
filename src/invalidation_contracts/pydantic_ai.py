"""PydanticAI: an MCP toolset whose tool results feed a fix memory (the ``pydantic-ai`` extra).

``ContractToolset`` is PydanticAI's own ``MCPToolset`` with a ``ContractSession`` bound to the
session it opens, so adoption is one line on top of the framework's example::

    agent = Agent(model, toolsets=[ContractToolset("http://127.0.0.1:8000/mcp", memory)])

Every tool call goes through ``ContractSession.hook``: the fixes relevant to the model's
arguments are patched in (``apply="client"``, the default) or listed in the toolset's
instructions for the model to apply (``apply="model"``: each tool's fixes at L2, before any
draft exists; in client mode the instructions list the fixes the client cannot patch in); the
result feeds the memory, and the model is shown the model view. A failing
call raises ``ModelRetry`` with that view, so the model retries with the suggestions in hand;
PydanticAI's own prompt path is unchanged. The watcher follows ``resources/updated`` on the
toolset's session, so a fix a table move made stale is evicted before the next call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Unpack, cast

from ._extras import missing

try:
    from mcp import StdioServerParameters
    from pydantic_ai import ModelRetry, RunContext
    from pydantic_ai.mcp import CallToolFunc, MCPToolset, MCPToolsetClient
except ModuleNotFoundError as exc:
    raise missing(exc, "pydantic-ai", mcp="mcp") from exc

from .client.memory import FixMemory
from .mcp.calls import warn_bypass
from .mcp.options import SessionKwargs, SessionOptions, session_and_sdk
from .mcp.origins import BY_SERVER_NAME as _BY_SERVER_NAME
from .mcp.origins import target_origin
from .mcp.session import ContractSession, message_handler

__all__ = ["ContractToolset", "model_value"]


class ContractToolset(MCPToolset[Any]):
    """``MCPToolset`` over ``client`` (a URL, a FastMCP transport or client, ...) bound to
    ``memory``. ``options`` (or ``SessionOptions``' names as keywords): the contract session's;
    ``apply="client"`` patches the relevant fixes into the model's arguments and lists in the
    toolset's instructions those it cannot patch, ``"model"`` lists every fix there instead; the
    origin defaults to the target (the URL, or a stdio transport's command line,
    ``mcp.origins``). ``sdk``: ``MCPToolset``'s own keywords (``{"headers": ..., "init_timeout":
    ...}``)."""

    def __init__(
        self,
        client: MCPToolsetClient,
        memory: FixMemory,
        options: SessionOptions | None = None,
        *,
        sdk: Mapping[str, Any] | None = None,
        **session: Unpack[SessionKwargs],
    ) -> None:
        chosen, toolset_options = session_and_sdk("ContractToolset", options, session, sdk)
        if "process_tool_call" in toolset_options:
            raise TypeError("ContractToolset makes its own tool calls: no process_tool_call")
        _check_shape(client)
        origin = chosen.origin or _origin_of(client)
        if not origin:
            raise ValueError(_NO_ORIGIN.format(shape=type(client).__name__))
        self._own_handler = toolset_options.pop("message_handler", None)
        on_message = message_handler(lambda: self.contract, self._own_handler)
        super().__init__(
            client, process_tool_call=self._process, message_handler=on_message, **toolset_options
        )
        self.memory = memory
        self.session_options = chosen.but(origin=origin)
        self.apply_mode = chosen.mode
        self.contract: ContractSession | None = None

    async def for_run(self, ctx: RunContext[Any]) -> ContractToolset:
        """PydanticAI's toolset for a run: a copy of its own when ``auth`` or ``headers`` is a
        function of the run context, then bound to a contract of its own (its calls and its
        session's notifications go through it, not through the template's)."""
        run = await super().for_run(ctx)
        if run is not self:
            run.contract = None
            run.process_tool_call = run._process
        return run

    def _build_client(self, *, auth: Any, headers: Any) -> Any:
        """PydanticAI's FastMCP client, with a message handler that reaches this toolset's own
        contract (a per-run copy builds its client on itself)."""
        shared = self._client_options
        if shared is not None:
            own = message_handler(lambda: self.contract, self._own_handler)
            self._client_options = cast(Any, {**shared, "message_handler": own})
        try:
            return super()._build_client(auth=auth, headers=headers)
        finally:
            self._client_options = shared

    async def __aenter__(self) -> ContractToolset:
        await super().__aenter__()
        if self.contract is None and self.is_running:
            contract = ContractSession(self.client.session, self.memory, self.session_options)
            try:
                await contract.__aenter__()
            except BaseException:
                await super().__aexit__(None, None, None)
                raise
            self.contract = contract
        return self

    async def __aexit__(self, *args: Any) -> bool | None:
        if self._running_count == 1 and self.contract is not None:
            contract, self.contract = self.contract, None
            await contract.__aexit__(None, None, None)
        return await super().__aexit__(*args)

    async def _process(
        self, ctx: RunContext[Any], call_tool: CallToolFunc, name: str, args: dict[str, Any]
    ) -> Any:
        """The toolset's ``process_tool_call``: the call through the contract session."""
        if self.contract is None:  # not entered with a session: the call cannot be followed
            origin = self.session_options.origin
            origin = self.label if origin == _BY_SERVER_NAME else origin
            warn_bypass(str(origin), f"{name} called outside a contract session")
            return await call_tool(name, args)
        text, is_error = await self.contract.hook(name, args)
        if is_error:
            raise ModelRetry(text)
        return model_value(text)

    async def get_instructions(self, ctx: RunContext[Any]) -> Any:
        """The server's instructions (``include_instructions``), then the fixes the model must
        apply itself at L2 (``AgentCalls.instructions``: every fix in model apply mode, those
        the client cannot patch in client mode; nothing is drafted yet, so each has its
        condition)."""
        own = await super().get_instructions(ctx)
        if self.contract is None:
            return own
        shown = await self.contract.instructions(self.contract.tools)
        if not shown:
            return own
        return [part for part in (own, shown) if part]


_NO_ORIGIN = (
    "ContractToolset cannot tell which server a {shape} talks to (no URL, no command line): "
    "pass origin=, e.g. origin=target_origin(url) (mcp.origins), so two servers of one name "
    "keep their fixes apart; origin=BY_SERVER_NAME keys them by the server's name (a server "
    "run in process)"
)


def _check_shape(client: object) -> None:
    """Refuse a pre-built ``fastmcp.Client``: PydanticAI takes no message handler beside one,
    and without it the contract never hears of a change (issue 38)."""
    from fastmcp import Client

    if isinstance(client, Client):
        raise TypeError(
            "ContractToolset needs to route the client's notifications to the contract, which "
            "a pre-built fastmcp.Client does not allow: pass its target instead (the URL, or "
            "the transport: ContractToolset(client.transport, memory)), with the Client's "
            "options in ContractToolset's sdk={...}"
        )


def _origin_of(client: object) -> str | None:
    """The origin of a toolset's target (``mcp.origins``): a URL (or an HTTP transport's), or a
    stdio transport's command line; None for anything else (refused without ``origin=``)."""
    if isinstance(client, str):
        return target_origin(client)
    url = getattr(client, "url", None)  # FastMCP's StreamableHttpTransport, SSETransport
    if isinstance(url, str) and url:
        return target_origin(url)
    command, args = getattr(client, "command", None), getattr(client, "args", None)
    if isinstance(command, str) and isinstance(args, list):
        cwd = getattr(client, "cwd", None)
        return target_origin(StdioServerParameters(command=command, args=args, cwd=cwd))
    return None


def model_value(text: str) -> Any:
    """The model view's text as the value a framework returns to the model: its JSON object,
    or the text when it is not JSON (a tool answer the contract does not cover)."""
    try:
        return json.loads(text)
    except ValueError:
        return text
