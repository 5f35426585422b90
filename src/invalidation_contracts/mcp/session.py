"""The client side: an MCP session whose tool results feed a fix memory.

``ContractSession`` wraps the SDK's ``ClientSession``. Every tool result is observed by the
memory under the server's identity (the origin) and the tool's name (the operation); the needs
the memory returns (a changes feed, a rules listing) are read from the contract resources; a
``resources/updated`` notification for the versions makes it read them at once, so what a table
move made stale is evicted before the agent's next call. An agent loop gets the relevant fixes
for a call's arguments, the L2/L3 rendering, client-side patching of the arguments, and a model
view of each result without the contract's metadata::

    async with connect(StdioServerParameters(command="acme-mcp"), memory) as tools:
        fixes = (await tools.lookup("create_subscription", draft)).entries
        shown = tools.prompt(base_system, fixes, Level.AMENDED_INPUT, draft)  # for the model
        reply = await tools.call_tool("create_subscription", planned, injected=fixes)
        reply.for_model  # the result as the model is shown it

Errors the SDK raises (an unknown tool, a closed connection) reach the caller as they are. The
session's options are one ``SessionOptions`` (``mcp.options``); what it reads of the contract
resources is ``mcp.reads``; a call's reply is a ``ToolReply`` (``mcp.reply``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, Self, Unpack

import anyio
import mcp_types as types
from mcp.client import Transport
from mcp.client.client import Client
from mcp.client.session import ClientSession, IncomingMessage, MessageHandlerFnT
from mcp.client.stdio import StdioServerParameters
from mcp.server import Server
from mcp.server.mcpserver import MCPServer
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..client.entries import MemoryEntry
from ..client.events import Ignored, MemoryEvent, Need, Observation
from ..client.memory import AsyncFixMemory, FixMemory
from ..client.values import Observed
from ..protocol.signing import Binding
from . import calls, names
from .options import Listener, SessionKwargs, SessionOptions, session_and_sdk, session_options
from .origins import BY_SERVER_NAME, named_origin, target_origin
from .reads import ContractReads, request_meta
from .reply import ToolReply
from .results import read_tool_result
from .watch import Watcher, follow

__all__ = ["ContractSession", "Listener", "ServerTarget", "ToolReply", "connect", "message_handler"]

logger = logging.getLogger("invalidation_contracts.client")

ServerTarget = Server[Any] | MCPServer | Transport | StdioServerParameters | str
"""What ``connect`` reaches a server by: what the SDK's ``Client`` takes (a URL, a
``StdioServerParameters``, a ``Transport``, or an in-process server)."""

_NO_ORIGIN = (
    "ContractSession needs origin=: the server's URL or command line, e.g. "
    "origin=target_origin(url) (mcp.origins), so two servers of one name keep their "
    "fixes apart; origin=BY_SERVER_NAME keys them by the server's name"
)


class ContractSession(calls.AgentCalls):
    """An entered ``ClientSession`` whose tool results feed ``memory``.

    ``options`` (or the same names as keywords): ``SessionOptions``; ``origin`` is required
    here. ``session`` may be one a framework opened (PydanticAI's, the Agents SDK's): any entered
    ``ClientSession``. On a connection before 2026-07-28, route its message handler to
    ``on_message`` so ``resources/updated`` reaches the watcher (``connect`` does).
    """

    def __init__(
        self,
        session: ClientSession,
        memory: FixMemory | AsyncFixMemory,
        options: SessionOptions | None = None,
        **kwargs: Unpack[SessionKwargs],
    ) -> None:
        self.options = session_options(options, kwargs)
        if not self.options.origin:
            raise ValueError(_NO_ORIGIN)
        self.apply = self.options.mode
        self.session = session
        self.memory = AsyncFixMemory.over(memory)
        self.watch = self.options.watch and memory.strategy.invalidates
        self.listener = self.options.listener
        self.watch_listener = self.options.watch_listener
        self._origin = self.options.origin
        self.reads = ContractReads(
            session, self.memory, lambda: self.origin, self._emit, conditional=self.conditional
        )
        self._watcher = Watcher(
            lambda: self.reads.refresh(self.watch_listener),
            on_lost=lambda: memory.reopened(self.origin),
            on_announced=lambda: memory.announced(self.origin),
        )
        self._tasks: anyio.abc.TaskGroup | None = None
        self.tools: dict[str, types.Tool] = {}
        self.reply_listener: Callable[[ToolReply], None] | None = None
        """Given each ``call_tool`` reply as received, contract included (what a framework
        adapter keeps from its model; the harness records it)."""

    @property
    def conditional(self) -> bool:
        return self.options.conditional

    @property
    def origin(self) -> str:
        if self._origin == BY_SERVER_NAME:
            info = self.session.server_info
            if info is None or not info.name:
                raise ValueError("the server gave no name: pass origin= to ContractSession")
            self._origin = named_origin(info.name)
        return self._origin

    async def __aenter__(self) -> Self:
        _ = self.origin
        await self.list_tools()
        await self.confirm()
        if self.watch and self._subscribable():
            self._tasks = anyio.create_task_group()
            await self._tasks.__aenter__()
            self._tasks.start_soon(self._watcher.run)
            self._tasks.start_soon(follow, self.session, self._watcher)
        return self

    async def __aexit__(self, *exc: object) -> None:
        tasks, self._tasks = self._tasks, None
        if tasks is not None:
            tasks.cancel_scope.cancel()
            await tasks.__aexit__(None, None, None)

    # ------------------------------------------------------------------ what an agent loop uses

    async def list_tools(self) -> list[types.Tool]:
        """The server's tools; the request fields they publish as patchable are given to the
        memory (client apply mode)."""
        listing = await self.session.list_tools()
        self.tools = {tool.name: tool for tool in listing.tools}
        patchable = sorted(
            {
                str(name)
                for tool in listing.tools
                for name in (names.meta_value(tool.meta, names.PATCHABLE) or ())
            }
        )
        if patchable:
            await self.memory.set_patchable(self.origin, patchable)
        return list(listing.tools)

    async def confirm(self, *, listener: Listener | None = None) -> tuple[Need, ...]:
        """Confirm the origin before its fixes are served (``client.confirmation``): what moved
        since the memory's stored position is read now, once per connection; ``__aenter__``
        does it before it returns. Returns the needs still outstanding (then the origin's
        entries stay withheld until a later read confirms it)."""
        self.memory.reopened(self.origin)
        needs = await self.memory.needs(self.origin)
        return await self.fulfil(needs, listener=listener or self.watch_listener)

    async def begin_episode(
        self, episode: int, *, listener: Listener | None = None
    ) -> tuple[Need, ...]:
        """Start an episode: fetch what the memory wants first (resync detection); returns the
        needs still outstanding."""
        needs = await self.memory.begin_episode(self.origin, episode)
        return await self.fulfil(needs, episode=episode, listener=listener)

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        episode: int | None = None,
        injected: Iterable[MemoryEntry | str] = (),
        listener: Listener | None = None,
        meta: Mapping[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
    ) -> ToolReply:
        """Call a tool and feed its result to the memory (operation: the tool's name).

        ``injected``: the fixes (or their ids) put into the arguments, so fixes learned from
        this result record them as ``derived_from``. ``listener`` gets this call's events.
        """
        request = dict(arguments or {})
        position = (await self.reads.position()).to_meta(self.spelling)
        call_meta: dict[str, Any] = {**position, **(meta or {})}
        if self.memory.trust.requests_signatures:
            call_meta[names.key_for(names.SIGN, self.spelling)] = "1"
        result = await self.session.call_tool(
            name, request, read_timeout_seconds, meta=request_meta(call_meta)
        )
        answer = read_tool_result(result)
        ids = tuple(e.id if isinstance(e, MemoryEntry) else str(e) for e in injected)
        if answer.ignored is not None:
            event = Ignored(origin=self.origin, episode=episode, detail=f"{name}: {answer.ignored}")
            logger.warning("ignored a result of %s from %s: %s", name, self.origin, answer.ignored)
            obs = Observation(events=(event,))
        else:
            observed = Observed(
                request,
                answer.status,
                answer.body,
                injected=ids,
                delta_since=answer.delta_since,
                response_bytes=answer.size,
                contract_bytes=answer.cost.contract if answer.cost is not None else None,
                signature=answer.signature,
                binding=Binding(req=f"tools/call {name}"),
            )
            obs = await self.memory.observe(self.origin, observed, operation=name, episode=episode)
        events = list(obs.events)
        self._emit(obs.events, listener)
        record = _both(events, listener)
        outstanding = await self.fulfil(obs.needs, episode=episode, listener=record)
        reply = ToolReply(
            result, answer.status, answer.body, tuple(events), answer.cost, outstanding
        )
        if self.reply_listener is not None:
            self.reply_listener(reply)
        return reply

    async def fulfil(
        self,
        needs: Iterable[Need],
        *,
        episode: int | None = None,
        listener: Listener | None = None,
    ) -> tuple[Need, ...]:
        """Read each need from the contract resources and feed the answer to the memory, for up
        to ``MAX_NEED_ROUNDS`` rounds; returns the needs still outstanding."""
        return await self.reads.fulfil(needs, episode=episode, listener=listener)

    async def caught_up(self, seq: int, *, timeout_s: float = 10.0) -> None:
        """Wait until a notification-driven refresh has read the contract at ``seq`` or later
        (``TimeoutError`` after ``timeout_s``): for tests and harnesses that must know the
        memory has heard of a change before they go on."""
        await self._watcher.caught_up(seq, timeout_s=timeout_s)

    async def on_message(self, message: IncomingMessage) -> None:
        """The session's message handler (``ClientSession(message_handler=...)``): a
        ``resources/updated`` for the versions, on a connection before 2026-07-28, wakes the
        watcher (``connect`` wires this)."""
        if (
            self._tasks is not None
            and isinstance(message, types.ResourceUpdatedNotification)
            and str(message.params.uri) == names.VERSIONS
            and self.session.protocol_version not in MODERN_PROTOCOL_VERSIONS
        ):
            self._watcher.announced()

    @property
    def spelling(self) -> str:
        """How this server spells the ``_meta`` keys (``ContractReads.spelling``)."""
        return self.reads.spelling

    # ------------------------------------------------------------------ internals

    def _subscribable(self) -> bool:
        capabilities = self.session.server_capabilities
        resources = capabilities.resources if capabilities is not None else None
        return bool(resources is not None and resources.subscribe)

    def emit(self, events: Iterable[MemoryEvent]) -> None:
        self._emit(events, None)

    def _emit(self, events: Iterable[MemoryEvent], listener: Listener | None) -> None:
        for target in (self.listener, listener):
            if target is not None:
                for event in events:
                    target(event)


def _both(events: list[MemoryEvent], listener: Listener | None) -> Listener:
    """A listener that records into ``events``, then hands the event on to ``listener``."""

    def both(event: MemoryEvent) -> None:
        events.append(event)
        if listener is not None:
            listener(event)

    return both


def message_handler(
    contract: Callable[[], ContractSession | None], user: MessageHandlerFnT | None
) -> MessageHandlerFnT:
    """An SDK message handler for a session a ``ContractSession`` wraps: each server message
    goes to the contract session (``contract()``, once there is one: a server may speak before
    it is bound), then to ``user``'s handler, if any (every adapter chains them so)."""

    async def on_message(message: IncomingMessage) -> None:
        bound = contract()
        if bound is not None:
            await bound.on_message(message)
        if user is not None:
            await user(message)

    return on_message


@contextlib.asynccontextmanager
async def connect(
    server: ServerTarget,
    memory: FixMemory | AsyncFixMemory,
    options: SessionOptions | None = None,
    *,
    sdk: Mapping[str, Any] | None = None,
    **session: Unpack[SessionKwargs],
) -> AsyncIterator[ContractSession]:
    """Connect to ``server`` with the SDK's ``Client`` (a URL: streamable HTTP; a
    ``StdioServerParameters``: a subprocess over stdio; a ``Server``: in process) and wrap its
    session. ``options`` (or ``SessionOptions``' names as keywords) configure the session;
    ``sdk`` holds ``Client``'s own keywords (``{"mode": ..., "read_timeout_seconds": ...}``).
    The origin is bound to the target (``mcp.origins.target_origin``) unless the options name
    it."""
    chosen, client_options = session_and_sdk("connect", options, session, sdk)
    chosen = chosen.but(origin=chosen.origin or target_origin(server) or BY_SERVER_NAME)
    wired: list[ContractSession] = []
    handler = message_handler(
        lambda: wired[0] if wired else None, client_options.pop("message_handler", None)
    )
    async with Client(server, message_handler=handler, **client_options) as client:
        contract = ContractSession(client.session, memory, chosen)
        wired.append(contract)
        async with contract:
            yield contract
