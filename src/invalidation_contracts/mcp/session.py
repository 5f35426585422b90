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

Errors the SDK raises (an unknown tool, a closed connection) reach the caller as they are.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self, cast

import anyio
import mcp_types as types
from mcp.client import Transport
from mcp.client.client import Client
from mcp.client.session import ClientSession, IncomingMessage, MessageHandlerFnT
from mcp.client.stdio import StdioServerParameters
from mcp.server import Server
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from ..client.entries import MemoryEntry
from ..client.events import Ignored, MemoryEvent, Need, Observation
from ..client.memory import AsyncFixMemory, FixMemory
from ..client.modelview import model_text, model_view
from ..client.needs import need_loop
from ..client.shared.steps import adrive
from ..client.values import Answer, Observed
from ..protocol.signing import Binding
from ..protocol.wirecost import WireCost
from . import calls, names
from .origins import BY_SERVER_NAME, named_origin, target_origin
from .results import read_resource_result, read_tool_result
from .watch import Watcher, follow

logger = logging.getLogger("invalidation_contracts.client")

ServerTarget = Server[Any] | MCPServer | Transport | StdioServerParameters | str
"""What ``connect`` reaches a server by: what the SDK's ``Client`` takes (a URL, a
``StdioServerParameters``, a ``Transport``, or an in-process server)."""

Listener = Callable[[MemoryEvent], None]
#: MCP error codes that mean the request never got an answer (the need stays outstanding).
_UNANSWERED = frozenset({types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT})


@dataclass(frozen=True, slots=True)
class ToolReply:
    """A tool call's result, what the memory read of it, and what it did."""

    result: types.CallToolResult
    status: int
    """200, or the problem document's status for an ``isError`` result."""
    body: dict[str, Any]
    """The structured content as received (what the memory was given)."""
    events: tuple[MemoryEvent, ...] = ()
    """Every memory event the call caused, its needs' included."""
    cost: WireCost | None = None
    outstanding: tuple[Need, ...] = field(default=())

    @property
    def is_error(self) -> bool:
        return bool(self.result.is_error)

    @property
    def for_model(self) -> str:
        """The result as the model is shown it: the contract answer without the contract's
        metadata (``client.modelview``), else the result's text."""
        if self.body:
            return model_text(self.body, joined_detail=False)
        return "\n".join(
            block.text for block in self.result.content if isinstance(block, types.TextContent)
        )

    def to_call_tool_result(self) -> types.CallToolResult:
        """The model view as a ``CallToolResult`` (for a framework that shows results as they
        are): ``for_model`` as its text, the model view as its structured content, no
        ``_meta``."""
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=self.for_model)],
            structured_content=model_view(self.body, joined_detail=False) if self.body else None,
            is_error=self.is_error,
        )


_NO_ORIGIN = (
    "ContractSession needs origin=: the server's URL or command line, e.g. "
    "origin=target_origin(url) (mcp.origins), so two servers of one name keep their "
    "fixes apart; origin=BY_SERVER_NAME keys them by the server's name"
)


class ContractSession(calls.AgentCalls):
    """An entered ``ClientSession`` whose tool results feed ``memory``.

    ``origin``: the memory's key for this server, required: a session does not say what it is
    connected to, and the name a server gives may be another's. ``connect`` binds it to the
    transport target (``mcp.origins.target_origin``); ``origin=BY_SERVER_NAME`` asks for
    ``mcp://`` + the ``serverInfo`` name on purpose.
    ``conditional``: send the memory's position, so results carry only
    the tables moved since. ``watch``: follow ``resources/updated`` for the versions (eager
    detection without polling; only for strategies that invalidate). ``listener``: given every
    memory event, the ones notifications cause included; ``watch_listener``: given only those
    (the events of no call, e.g. an eviction between two episodes). ``apply``: how ``hook``
    uses the fixes, ``"client"`` (patched into the arguments) or ``"model"`` (shown in the
    prompt, ``lookup`` without arguments).

    ``session`` may be one a framework opened (PydanticAI's, the Agents SDK's): any entered
    ``ClientSession``. On a connection before 2026-07-28, route its message handler to
    ``on_message`` so ``resources/updated`` reaches the watcher (``connect`` does).
    """

    def __init__(
        self,
        session: ClientSession,
        memory: FixMemory | AsyncFixMemory,
        *,
        origin: str | None = None,
        conditional: bool = True,
        watch: bool = True,
        listener: Listener | None = None,
        watch_listener: Listener | None = None,
        apply: str = "client",
    ) -> None:
        if not origin:
            raise ValueError(_NO_ORIGIN)
        self.apply = calls.check_apply(apply)
        self.session = session
        self.memory = AsyncFixMemory.over(memory)
        self.conditional = conditional
        self.watch = watch and memory.strategy.invalidates
        self.listener = listener
        self.watch_listener = watch_listener
        self._origin = origin
        self._watcher = Watcher(
            self._refresh,
            on_lost=lambda: memory.reopened(self.origin),
            on_announced=lambda: memory.announced(self.origin),
        )
        self._tasks: anyio.abc.TaskGroup | None = None
        self.tools: dict[str, types.Tool] = {}
        self.reply_listener: Callable[[ToolReply], None] | None = None
        """Given each ``call_tool`` reply as received, contract included (what a framework
        adapter keeps from its model; the harness records it)."""

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
        position = (await self._position()).to_meta(self.spelling)
        call_meta: dict[str, Any] = {**position, **(meta or {})}
        if self.memory.trust.requests_signatures:
            call_meta[names.key_for(names.SIGN, self.spelling)] = "1"
        result = await self.session.call_tool(
            name, request, read_timeout_seconds, meta=_meta(call_meta)
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
        rounds = need_loop(tuple(needs))
        return await adrive(rounds, lambda need: self._fulfil(need, episode, listener), ())

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

    # ------------------------------------------------------------------ internals

    async def _fulfil(
        self, need: Need, episode: int | None, listener: Listener | None
    ) -> tuple[Need, ...] | None:
        try:
            # The position rides in ``_meta`` (servers before 0.3 ignore it there): a worker
            # behind it catches up before answering (SPEC §8.2 rule 3).
            known = await self._known()
            uri = names.need_uri(need)
            meta = {**known.to_meta(), **self._sign_meta()}
            result = await self.session.read_resource(uri, meta=_meta(meta))
        except MCPError as exc:
            if exc.code in _UNANSWERED:
                obs = await self.memory.fetch_failed(need, f"MCPError: {exc}", episode=episode)
                self._emit(obs.events, listener)
                return None
            obs = await self.memory.answer(need, Answer.unusable(), episode=episode)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            obs = await self.memory.fetch_failed(need, detail, episode=episode)
            self._emit(obs.events, listener)
            return None
        else:
            read = read_resource_result(result, self.memory.limits)
            answer = Answer(
                read.status,
                read.body,
                signature=read.signature,
                body_bytes=read.body_bytes,
                refused=read.refused,
            )
            obs = await self.memory.answer(need, answer, episode=episode)
        self._emit(obs.events, listener)
        return obs.needs

    async def _refresh(self) -> int | None:
        """Read the versions into the memory (a notification said they moved)."""
        position = await self._position()
        uri = names.VERSIONS + position.query()
        result = await self.session.read_resource(uri, meta=_meta(self._sign_meta()))
        answer = read_resource_result(result, self.memory.limits, "max_body_bytes")
        if answer.status != 200 or not isinstance(answer.body, dict):
            status = answer.status if answer.status is not None else "nothing readable"
            logger.warning("%s answered %s for its versions", self.origin, status)
            return None
        observed = Observed(
            None,
            200,
            answer.body,
            delta_since=answer.delta_since,
            response_bytes=answer.body_bytes,
            signature=answer.signature,
        )
        obs = await self.memory.observe(self.origin, observed)
        self._emit(obs.events, self.watch_listener)
        await self.fulfil(obs.needs, listener=self.watch_listener)
        seq = answer.body.get("contract_seq", position.since)  # absent: still at ``since``
        return seq if isinstance(seq, int) and not isinstance(seq, bool) else None

    async def _position(self) -> names.MetaPosition:
        if not self.conditional:
            return names.MetaPosition()
        return await self._known()

    async def _known(self) -> names.MetaPosition:
        """The position the memory knows of this server (sent with every contract read)."""
        known = await self.memory.position(self.origin)
        return names.MetaPosition(known.seq, known.epoch)

    def _sign_meta(self) -> dict[str, Any]:
        if not self.memory.trust.requests_signatures:
            return {}
        return {names.key_for(names.SIGN, self.spelling): "1"}

    @property
    def spelling(self) -> str:
        """How this server spells the ``_meta`` keys: ``meta`` (reverse DNS) when it advertises
        the extension (``extensions`` on 2026-07-28, ``experimental`` before), else ``inline``
        (0.1's prefix, which every server reads)."""
        capabilities = self.session.server_capabilities
        if capabilities is None:
            return names.INLINE_ENVELOPE
        for advertised in (capabilities.extensions, capabilities.experimental):
            if advertised and names.EXTENSION in advertised:
                return names.META_ENVELOPE
        return names.INLINE_ENVELOPE

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


def _meta(entries: Mapping[str, Any]) -> types.RequestParamsMeta | None:
    """Request ``_meta`` for the SDK (an open mapping), or None when there is nothing to send."""
    return cast(types.RequestParamsMeta, dict(entries)) if entries else None


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
    *,
    origin: str | None = None,
    conditional: bool = True,
    watch: bool = True,
    listener: Listener | None = None,
    watch_listener: Listener | None = None,
    apply: str = "client",
    **client_options: Any,
) -> AsyncIterator[ContractSession]:
    """Connect to ``server`` with the SDK's ``Client`` (a URL: streamable HTTP; a
    ``StdioServerParameters``: a subprocess over stdio; a ``Server``: in process) and wrap its
    session; ``client_options`` go to ``Client`` (``mode``, ``read_timeout_seconds``, ...).
    The origin is bound to the target (``mcp.origins.target_origin``) unless ``origin`` names it."""
    wired: list[ContractSession] = []
    handler = message_handler(
        lambda: wired[0] if wired else None, client_options.pop("message_handler", None)
    )
    async with Client(server, message_handler=handler, **client_options) as client:
        contract = ContractSession(
            client.session,
            memory,
            origin=origin or target_origin(server) or BY_SERVER_NAME,
            conditional=conditional,
            watch=watch,
            listener=listener,
            watch_listener=watch_listener,
            apply=apply,
        )
        wired.append(contract)
        async with contract:
            yield contract
