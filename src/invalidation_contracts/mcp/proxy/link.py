"""The proxy's one connection to its upstream: opened, confirmed, watched, and opened again.

A supervisor task owns the connection (the SDK's ``Client`` must be closed by the task that
opened it): it connects when asked, wraps a contract-speaking upstream in a ``ContractSession``
over the proxy's one memory (confirmed before the first call is served), and waits until the
connection breaks. A request that finds it broken, or breaks it (the upstream died, did not
answer in time, or wrote something that is not MCP), gets an ``MCPError`` naming the upstream;
the next request connects again. The memory outlives every connection.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import mcp_types as types
from mcp.client.client import Client
from mcp.client.session import ClientSession, IncomingMessage, LoggingFnT
from mcp.shared.dispatcher import ProgressFnT
from mcp.shared.exceptions import MCPError

from ...client.memory import AsyncFixMemory
from .. import names
from ..session import ContractSession, message_handler
from .target import UpstreamTarget
from .view import result_size

logger = logging.getLogger("invalidation_contracts.proxy")

Forward = Callable[[IncomingMessage], Awaitable[None]]
#: The host's progress callback for the tool call the current task makes (None: none asked).
PROGRESS: contextvars.ContextVar[ProgressFnT | None] = contextvars.ContextVar(
    "invalidation_contracts_proxy_progress", default=None
)
#: Seconds a broken connection gets to close before it is abandoned.
CLOSE_TIMEOUT_S = 5.0
#: The errors of a connection that is gone (the SDK's, and the streams' own).
_GONE = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)


@dataclass(frozen=True, slots=True)
class LinkOptions:
    """The bounds the proxy holds its upstream to."""

    call_timeout_s: float = 120.0
    """Seconds a request may wait for the upstream's answer (then: hung; connect again)."""
    connect_timeout_s: float = 30.0
    """Seconds to connect, confirm the memory and list the tools."""
    max_result_bytes: int = 8 * 1024 * 1024
    """The largest tool result (as JSON) passed to the memory and the host."""


class Oversized(Exception):
    """An upstream tool result over ``LinkOptions.max_result_bytes``."""


@dataclass(slots=True)
class UpstreamConnection:
    """One open connection: the SDK client, the contract session over it (None: the upstream
    speaks no contract), and the event that says it broke."""

    client: Client
    session: ClientSession
    """The client's session, its tool results bounded (``BoundedSession``)."""
    contract: ContractSession | None = None
    broken: anyio.Event = field(default_factory=anyio.Event)


class BoundedSession:
    """The upstream's ``ClientSession`` as the contract session uses it: each tool result over
    the size bound is refused before the memory reads it, and the host's progress callback
    (``PROGRESS``) rides on the call. Everything else is the session's.

    A tool call is sent as a plain ``tools/call`` request: the SDK's ``call_tool`` would also
    check the result's structured content against the tool's output schema (and list the tools
    first to learn it), work the proxy need not do on every call, since the host's own client
    checks what it is given."""

    def __init__(self, session: ClientSession, max_result_bytes: int) -> None:
        self._session = session
        self._max = max_result_bytes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        read_timeout_seconds: float | None = None,
        progress_callback: ProgressFnT | None = None,
        *,
        meta: types.RequestParamsMeta | None = None,
    ) -> types.CallToolResult:
        result = await self._session.send_request(
            types.CallToolRequest(
                params=types.CallToolRequestParams(name=name, arguments=arguments, _meta=meta)
            ),
            types.CallToolResult,
            request_read_timeout_seconds=read_timeout_seconds,
            progress_callback=progress_callback or PROGRESS.get(),
        )
        size = result_size(result)
        if size > self._max:
            raise Oversized(f"a result of {size} bytes, over the proxy's bound of {self._max}")
        return result


class UpstreamLink:
    """The upstream's connection, for the host-facing handlers (``connection``, ``using``)."""

    def __init__(
        self,
        target: UpstreamTarget,
        memory: AsyncFixMemory,
        forward: Forward,
        options: LinkOptions | None = None,
    ) -> None:
        self.target = target
        self.memory = memory
        self.forward = forward
        self.options = options or LinkOptions()
        self.speaks_contract: bool | None = None
        """Whether the upstream speaks the contract (None: not connected yet)."""
        self.connections = 0
        self.on_open: Callable[[UpstreamConnection], Awaitable[None]] | None = None
        """Called with each new connection before it serves (the host's subscriptions)."""
        self._conn: UpstreamConnection | None = None
        self._wanted = anyio.Event()
        self._ready = anyio.Event()
        self._last_error = "not connected yet"

    # ------------------------------------------------------------------ what handlers use

    def error(self, what: str, code: int = types.INTERNAL_ERROR) -> MCPError:
        """An MCP error naming the upstream."""
        return MCPError(code, f"upstream MCP server {self.target.name}: {what}")

    async def connection(self) -> UpstreamConnection:
        """The open connection, connecting first if there is none (``MCPError`` naming the
        upstream when that fails)."""
        conn = self._conn
        if conn is not None and not conn.broken.is_set():
            return conn
        ready = self._ready
        self._wanted.set()
        with anyio.move_on_after(self.options.connect_timeout_s + CLOSE_TIMEOUT_S + 1.0):
            await ready.wait()
        conn = self._conn
        if conn is None or conn.broken.is_set():
            raise self.error(f"cannot connect: {self._last_error}")
        return conn

    @contextlib.asynccontextmanager
    async def using(self) -> AsyncIterator[UpstreamConnection]:
        """The connection for one request, its failures as ``MCPError``s naming the upstream:
        a connection that closed or hung is broken (the next request connects again)."""
        conn = await self.connection()
        try:
            with anyio.fail_after(self.options.call_timeout_s):
                yield conn
        except TimeoutError:
            self._broke(conn, f"no answer within {self.options.call_timeout_s:g} s")
            raise self.error(
                f"did not answer within {self.options.call_timeout_s:g} s; reconnecting",
                types.REQUEST_TIMEOUT,
            ) from None
        except Oversized as exc:
            raise self.error(f"sent {exc}") from None
        except MCPError as exc:
            if exc.code in (types.CONNECTION_CLOSED, types.REQUEST_TIMEOUT):
                self._broke(conn, exc.message)
                raise self.error(f"{exc.message}; reconnecting", exc.code) from None
            if conn.broken.is_set():
                raise self.error(
                    f"the connection broke ({self._last_error}); reconnecting"
                ) from None
            raise  # the upstream's own error answer: the host gets it as it is
        except _GONE as exc:
            self._broke(conn, _describe(exc))
            raise self.error(f"the connection closed ({_describe(exc)}); reconnecting") from None

    # ------------------------------------------------------------------ the supervisor

    async def run(self) -> None:
        """Connect whenever asked, hold the connection until it breaks; until cancelled."""
        self._wanted.set()  # connect at once: the memory is confirmed before the first call
        while True:
            await self._wanted.wait()
            self._wanted = anyio.Event()
            conn: UpstreamConnection | None = None
            opened = False
            try:
                # The deadline bounds the opening only; the scope encloses the whole
                # connection, since the SDK's task groups must close inside it.
                deadline = anyio.current_time() + self.options.connect_timeout_s
                with anyio.CancelScope(deadline=deadline) as scope:
                    async with contextlib.AsyncExitStack() as stack:
                        conn = await self._open(stack)
                        opened, scope.deadline = True, math.inf
                        self._conn = conn
                        self._settle()
                        await conn.broken.wait()
                        self._conn = None
                        scope.deadline = anyio.current_time() + CLOSE_TIMEOUT_S  # then abandoned
                if scope.cancelled_caught and not opened:
                    raise TimeoutError(
                        f"no answer within {self.options.connect_timeout_s:g} s of starting"
                    )
            except Exception as exc:
                if opened:  # closing a broken connection failed too: nothing to tell
                    logger.debug("closing the upstream's connection: %s", _describe(exc))
                else:  # the connection failed: said to the requests waiting
                    self._last_error = _describe(exc)
                    logger.warning("upstream %s: %s", self.target.name, self._last_error)
                    self._conn = None
                    self._settle()
            finally:
                self._conn = None
                if conn is not None:
                    conn.broken.set()

    def _settle(self) -> None:
        """Wake the requests waiting for a connection attempt to end."""
        ready, self._ready = self._ready, anyio.Event()
        ready.set()

    def _broke(self, conn: UpstreamConnection, why: str) -> None:
        if not conn.broken.is_set():
            self._last_error = why
            logger.warning(
                "upstream %s: %s; reconnecting on the next request", self.target.name, why
            )
            conn.broken.set()

    async def _open(self, stack: contextlib.AsyncExitStack) -> UpstreamConnection:
        wired: list[ContractSession] = []
        current: list[UpstreamConnection] = []

        async def on_message(message: IncomingMessage) -> None:
            if isinstance(message, Exception):  # the upstream wrote something that is not MCP
                if current:
                    self._broke(current[0], f"it sent a message that is not MCP ({message})")
                return
            await self.forward(message)

        client = Client(
            self.target.server(),
            mode="legacy",
            message_handler=message_handler(lambda: wired[0] if wired else None, on_message),
            logging_callback=_log_upstream(self.target.name),
        )
        await stack.enter_async_context(client)
        bounded = cast(ClientSession, BoundedSession(client.session, self.options.max_result_bytes))
        conn = UpstreamConnection(client, bounded)
        current.append(conn)
        self.connections += 1
        if await _speaks_contract(client):
            contract = ContractSession(bounded, self.memory, origin=self.target.origin)
            wired.append(contract)
            await stack.enter_async_context(contract)
            conn.contract = contract
        elif self.speaks_contract is not False:
            logger.warning(
                "upstream %s speaks no contract: its tools are passed through unchanged, "
                "without a memory",
                self.target.name,
            )
        self.speaks_contract = conn.contract is not None
        if self.on_open is not None:
            await self.on_open(conn)
        return conn


async def _speaks_contract(client: Client) -> bool:
    """Whether the upstream speaks the contract: it advertises the extension, or lists the
    contract's versions resource (servers before the 2026-07-28 revision advertise nothing)."""
    capabilities = client.server_capabilities
    if capabilities.extensions and names.EXTENSION in capabilities.extensions:
        return True
    if capabilities.resources is None:
        return False
    try:
        listing = await client.session.list_resources()
    except MCPError:
        return False
    return any(str(resource.uri) == names.VERSIONS for resource in listing.resources)


def _log_upstream(name: str) -> LoggingFnT:
    """A logging callback: the upstream's log messages, on the proxy's log (stderr)."""

    async def log(params: types.LoggingMessageNotificationParams) -> None:
        logger.info("upstream %s [%s]: %s", name, params.level, params.data)

    return log


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(inner) for inner in exc.exceptions)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
