"""The read timeouts uvicorn lacks: a connection must finish each request's head in time, and
a request body may not stall while the server reads it.

uvicorn times a connection only between requests (its keep-alive timer, cancelled on the first
byte), so a client that connects and sends nothing, or sends part of a request line or of its
headers and stalls (slowloris), holds a connection, a file descriptor and its buffers until it goes
away. The protocol classes here arm a deadline when a connection opens and when the first byte of a
later request arrives, and cancel it once the request's headers are complete; at the deadline the
connection is closed, after a ``408`` problem document when part of a request had arrived (RFC 9110
§15.5.9: with ``Connection: close``). Likewise a body that sends nothing for ``body_timeout_s``
while the server is reading it (not while flow control has paused reading, nor while the client
waits for ``100 Continue``) ends its connection, with a ``408`` if no response has begun.

Both ``serve`` and ``serve-mcp --transport http`` run their uvicorn with ``server_config``; an
operator running a retrofitted app under their own uvicorn passes ``http=HeaderTimeoutProtocol``
(the CLI's ``--http invalidation_contracts.header_timeout:HeaderTimeoutProtocol``), the timeouts
from ``server_config``'s ``header_timeout_s`` / ``body_timeout_s`` or from
``$INVALIDATION_CONTRACTS_HEADER_TIMEOUT`` / ``$INVALIDATION_CONTRACTS_BODY_TIMEOUT``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._extras import require_extra
from .protocol.problems import ProblemType, problem
from .sockets import (
    BODY_TIMEOUT_ENV,
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    HEADER_TIMEOUT_ENV,
)
from .sockets import header_timeout as parse_header_timeout

if TYPE_CHECKING:
    from starlette.types import ASGIApp

require_extra("server", "uvicorn")

import h11  # noqa: E402
import uvicorn  # noqa: E402
from uvicorn.protocols.http.h11_impl import H11Protocol  # noqa: E402

__all__ = [
    "DEFAULT_BODY_TIMEOUT_S",
    "DEFAULT_HEADER_TIMEOUT_S",
    "HEADER_TIMEOUT_ENV",
    "HeaderTimeoutH11Protocol",
    "HeaderTimeoutProtocol",
    "body_timeout_of",
    "header_timeout_of",
    "parse_header_timeout",
    "server_config",
]


def _timeout_of(config: uvicorn.Config, what: str, env: str, default: float) -> float:
    seconds = getattr(config, f"{what}_timeout_s", None)
    if seconds is not None:
        return float(seconds)
    text = os.environ.get(env)
    return default if not text else parse_header_timeout(text, what)


def header_timeout_of(config: uvicorn.Config) -> float:
    """The header timeout ``config`` was made with (``server_config``), else the environment's,
    else ``DEFAULT_HEADER_TIMEOUT_S``."""
    return _timeout_of(config, "header", HEADER_TIMEOUT_ENV, DEFAULT_HEADER_TIMEOUT_S)


def body_timeout_of(config: uvicorn.Config) -> float:
    """The body timeout ``config`` was made with, else the environment's, else 30 s."""
    return _timeout_of(config, "body", BODY_TIMEOUT_ENV, DEFAULT_BODY_TIMEOUT_S)


class _ServerConfig(uvicorn.Config):
    """A ``uvicorn.Config`` that carries the read timeouts to every connection (and, pickled,
    to every worker process)."""

    def __init__(
        self, app: ASGIApp | str, *, header_timeout_s: float, body_timeout_s: float, **options: Any
    ) -> None:
        super().__init__(app, **options)
        self.header_timeout_s = parse_header_timeout(header_timeout_s)
        self.body_timeout_s = parse_header_timeout(body_timeout_s, "body")


def server_config(
    app: ASGIApp | str,
    *,
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    **options: Any,
) -> uvicorn.Config:
    """``uvicorn.Config(app, **options)`` serving with ``HeaderTimeoutProtocol`` (unless
    ``options`` names another ``http``), its deadlines ``header_timeout_s`` (a request's head)
    and ``body_timeout_s`` (a stall inside a body); ``ValueError`` for a timeout that is not a
    positive number."""
    options.setdefault("http", HeaderTimeoutProtocol)
    return _ServerConfig(
        app, header_timeout_s=header_timeout_s, body_timeout_s=body_timeout_s, **options
    )


class _Deadline:
    """One of a connection's read deadlines: armed, re-armed on progress, cancelled."""

    __slots__ = ("_handle", "_loop", "_on_expiry", "seconds")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, seconds: float, on_expiry: Callable[[], None]
    ) -> None:
        self._loop = loop
        self._on_expiry = on_expiry
        self._handle: asyncio.TimerHandle | None = None
        self.seconds = seconds

    @property
    def armed(self) -> bool:
        return self._handle is not None

    def arm(self) -> None:
        """Start the clock, unless it already runs for this request's head."""
        if self._handle is None:
            self._handle = self._loop.call_later(self.seconds, self._expire)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def restart(self) -> None:
        """A fresh period from now (progress was made)."""
        self.cancel()
        self.arm()

    def _expire(self) -> None:
        self._handle = None
        self._on_expiry()


def _timeout_response(detail: str) -> bytes:
    """The ``408`` sent to a connection whose request stalled: a problem document."""
    body = problem(ProblemType.REQUEST_TIMEOUT, detail).to_json()
    head = (
        "HTTP/1.1 408 Request Timeout\r\n"
        "content-type: application/problem+json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def _close(transport: asyncio.Transport, detail: str | None) -> None:
    """End a connection whose request is overdue (a ``408`` first when ``detail`` says why)."""
    if transport.is_closing():
        return
    if detail is not None:
        transport.write(_timeout_response(detail))
    transport.close()


class HeaderTimeoutH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the header and body deadlines.

    The head's is armed when the connection opens and whenever h11 waits for a request's head
    with some of it received (the first bytes of a keep-alive connection's next request, or a
    pipelined one buffered when a response completes); cancelled once h11 has parsed the head.
    An idle keep-alive connection is left to uvicorn's keep-alive timer. The body's runs while
    h11 expects body bytes, restarted by each one, and cancelled at the end of the body.
    """

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self._head = _Deadline(self.loop, header_timeout_of(config), self._head_overdue)
        self._body = _Deadline(self.loop, body_timeout_of(config), self._body_overdue)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head.arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head.cancel()
        self._body.cancel()
        super().connection_lost(exc)

    def _follow(self) -> None:
        state = self.conn.their_state
        if self.transport.is_closing():
            self._head.cancel()
            self._body.cancel()
        elif state is h11.IDLE:
            self._body.cancel()
            if self.conn.trailing_data[0]:
                self._head.arm()  # part of the next request's head has arrived
        elif state is h11.SEND_BODY:
            self._head.cancel()  # the head is complete
            self._body.restart()  # body bytes arrived (or the body begins)
        else:
            self._head.cancel()
            self._body.cancel()

    def _head_overdue(self) -> None:
        partial = self.conn.their_state is h11.IDLE and bool(self.conn.trailing_data[0])
        seconds = self._head.seconds
        detail = f"the request line and headers did not arrive within {seconds:g} s"
        _close(self.transport, detail if partial else None)

    def _body_overdue(self) -> None:
        if self.conn.their_state is not h11.SEND_BODY:
            return
        cycle = self.cycle
        waiting = cycle is not None and cycle.waiting_for_100_continue
        if self.flow.read_paused or waiting:
            self._body.arm()  # the server is not reading, or the client waits for it: no stall
            return
        answered = cycle is None or cycle.response_started
        detail = f"the request body sent nothing for {self._body.seconds:g} s"
        _close(self.transport, None if answered else detail)


HeaderTimeoutProtocol: type[asyncio.Protocol] = HeaderTimeoutH11Protocol
"""The protocol class both servers run: h11's, also where httptools is installed (uvicorn's
``http="auto"`` would pick httptools there; one parser, the tested one, serves everywhere)."""
