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

from ._extras import missing
from .protocol.problems import ProblemType, problem
from .sockets import (
    BODY_TIMEOUT_ENV,
    DEFAULT_BODY_DEADLINE_S,
    DEFAULT_BODY_MIN_RATE,
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    HEADER_TIMEOUT_ENV,
    RateLimitedLog,
)
from .sockets import header_timeout as parse_header_timeout

if TYPE_CHECKING:
    from starlette.types import ASGIApp

try:
    import h11
    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol
except ModuleNotFoundError as exc:
    raise missing(exc, "server") from exc

__all__ = [
    "DEFAULT_BODY_DEADLINE_S",
    "DEFAULT_BODY_MIN_RATE",
    "DEFAULT_BODY_TIMEOUT_S",
    "DEFAULT_HEADER_TIMEOUT_S",
    "DEFAULT_MAX_CONNECTIONS",
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


def max_connections_of(config: uvicorn.Config) -> int:
    """The connections one worker holds at once (``server_config``'s ``max_connections``)."""
    return int(getattr(config, "max_connections", DEFAULT_MAX_CONNECTIONS))


def body_min_rate_of(config: uvicorn.Config) -> float:
    """Bytes a second a request body must average beyond its first ``body_deadline_s``."""
    return float(getattr(config, "body_min_rate", DEFAULT_BODY_MIN_RATE))


def body_deadline_of(config: uvicorn.Config) -> float:
    """Seconds a request body has in all before its bytes earn it more."""
    return float(getattr(config, "body_deadline_s", DEFAULT_BODY_DEADLINE_S))


class _ServerConfig(uvicorn.Config):
    """A ``uvicorn.Config`` that carries the read timeouts and the connection cap to every
    connection (and, pickled, to every worker process), and whose event loops log running out of
    file descriptors at most once a second."""

    def __init__(
        self,
        app: ASGIApp | str,
        *,
        header_timeout_s: float,
        body_timeout_s: float,
        body_deadline_s: float = DEFAULT_BODY_DEADLINE_S,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        body_min_rate: float = DEFAULT_BODY_MIN_RATE,
        **options: Any,
    ) -> None:
        super().__init__(app, **options)
        self.header_timeout_s = parse_header_timeout(header_timeout_s)
        self.body_timeout_s = parse_header_timeout(body_timeout_s, "body")
        self.body_deadline_s = parse_header_timeout(body_deadline_s, "body deadline")
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, not {max_connections}")
        if not body_min_rate > 0:
            raise ValueError(f"body_min_rate must be positive, not {body_min_rate}")
        self.max_connections = max_connections
        self.body_min_rate = float(body_min_rate)

    def get_loop_factory(self) -> Callable[[], asyncio.AbstractEventLoop] | None:
        inner = super().get_loop_factory()

        def loop_factory() -> asyncio.AbstractEventLoop:
            loop = inner() if inner is not None else asyncio.new_event_loop()
            loop.set_exception_handler(RateLimitedLog().handle)
            return loop

        return loop_factory


def server_config(
    app: ASGIApp | str,
    *,
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    body_deadline_s: float = DEFAULT_BODY_DEADLINE_S,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    body_min_rate: float = DEFAULT_BODY_MIN_RATE,
    **options: Any,
) -> uvicorn.Config:
    """``uvicorn.Config(app, **options)`` serving with ``HeaderTimeoutProtocol`` (unless
    ``options`` names another ``http``), its deadlines ``header_timeout_s`` (a request's head)
    and ``body_timeout_s`` (a stall inside a body; the whole body may take ``body_deadline_s``
    plus one second per ``body_min_rate`` bytes), and at most ``max_connections`` connections
    per worker (503 beyond); ``ValueError`` for a timeout that is not a positive number."""
    options.setdefault("http", HeaderTimeoutProtocol)
    return _ServerConfig(
        app,
        header_timeout_s=header_timeout_s,
        body_timeout_s=body_timeout_s,
        body_deadline_s=body_deadline_s,
        max_connections=max_connections,
        body_min_rate=body_min_rate,
        **options,
    )


class _Deadline:
    """One of a connection's read deadlines: armed, moved on progress, cancelled.

    Progress only moves the due time later (a float); the timer already scheduled stays where it
    is and, firing early, re-arms itself at the moved time. A byte trickled in schedules no timer
    (no heap push, no cancelled handle left in the loop's heap): a slow connection costs O(1) per
    byte and one pending timer per deadline, whatever it sends (issue 42)."""

    __slots__ = ("_due", "_handle", "_loop", "_on_expiry", "seconds")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, seconds: float, on_expiry: Callable[[], None]
    ) -> None:
        self._loop = loop
        self._on_expiry = on_expiry
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self.seconds = seconds

    @property
    def armed(self) -> bool:
        return self._handle is not None

    def arm(self) -> None:
        """Start the clock, unless it already runs for this request's head."""
        if self._handle is None:
            self._due = self._loop.time() + self.seconds
            self._handle = self._loop.call_at(self._due, self._fire)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def restart(self) -> None:
        """A fresh period from now (progress was made)."""
        if self._handle is None:
            self.arm()
            return
        self._due = self._loop.time() + self.seconds
        if self._due < self._handle.when():  # sooner than the timer set: set it again
            self._handle.cancel()
            self._handle = self._loop.call_at(self._due, self._fire)

    def extend(self, seconds: float) -> None:
        """Move an armed deadline ``seconds`` later (arm it if it is not)."""
        if self._handle is None:
            self.arm()
        else:
            self._due += seconds

    def _fire(self) -> None:
        if self._handle is not None and self._due > self._handle.when():
            self._handle = self._loop.call_at(self._due, self._fire)  # moved since: wait on
            return
        self._handle = None
        self._on_expiry()


def _problem_response(kind: ProblemType, detail: str, extra: str = "") -> bytes:
    """A whole ``Connection: close`` response holding a problem document (written by the
    listener itself, before or instead of the app)."""
    body = problem(kind, detail).to_json()
    reason = {408: "Request Timeout", 503: "Service Unavailable"}[kind.status]
    head = (
        f"HTTP/1.1 {kind.status} {reason}\r\n"
        "content-type: application/problem+json\r\n"
        f"content-length: {len(body)}\r\n{extra}"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def _timeout_response(detail: str) -> bytes:
    """The ``408`` sent to a connection whose request stalled: a problem document."""
    return _problem_response(ProblemType.REQUEST_TIMEOUT, detail)


def _busy_response(cap: int) -> bytes:
    """The ``503`` a connection over the worker's cap gets, in place of its answer."""
    detail = f"this worker already holds {cap} connections; retry shortly"
    return _problem_response(ProblemType.REGISTRY_UNAVAILABLE, detail, "retry-after: 1\r\n")


def _close(transport: asyncio.Transport, response: bytes | None) -> None:
    """End a connection (after ``response``, a whole answer, when there is one)."""
    if transport.is_closing():
        return
    if response is not None:
        transport.write(response)
    transport.close()


class HeaderTimeoutH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the header and body deadlines and the connection cap.

    The head's is armed when the connection opens and whenever h11 waits for a request's head
    with some of it received (the first bytes of a keep-alive connection's next request, or a
    pipelined one buffered when a response completes); cancelled once h11 has parsed the head.
    An idle keep-alive connection is left to uvicorn's keep-alive timer. The body's stall
    deadline runs while h11 expects body bytes, restarted by each one; its total deadline starts
    with the body at ``body_deadline_s`` and each byte moves it ``1 / body_min_rate`` s later, so
    a body trickled a byte at a time ends however often it sends. A connection beyond the
    worker's ``max_connections`` is answered 503 (``Retry-After``) as soon as it speaks, and
    closed.
    """

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self._head = _Deadline(self.loop, header_timeout_of(config), self._head_overdue)
        self._body = _Deadline(self.loop, body_timeout_of(config), self._body_overdue)
        self._total = _Deadline(self.loop, body_deadline_of(config), self._body_too_slow)
        self._rate = body_min_rate_of(config)
        self._cap = max_connections_of(config)
        self._over_cap = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._over_cap = len(self.connections) > self._cap
        self._head.arm()

    def data_received(self, data: bytes) -> None:
        if self._over_cap:
            self._head.cancel()
            _close(self.transport, _busy_response(self._cap))
            return
        in_body = self.conn.their_state is h11.SEND_BODY
        super().data_received(data)
        if in_body and self.conn.their_state is h11.SEND_BODY:
            self._total.extend(len(data) / self._rate)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._head.cancel()
        self._body.cancel()
        self._total.cancel()
        super().connection_lost(exc)

    def _follow(self) -> None:
        state = self.conn.their_state
        if state is not h11.SEND_BODY or self.transport.is_closing():
            self._total.cancel()
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
            self._total.arm()  # the body's whole budget starts with it
        else:
            self._head.cancel()
            self._body.cancel()

    def _head_overdue(self) -> None:
        partial = self.conn.their_state is h11.IDLE and bool(self.conn.trailing_data[0])
        seconds = self._head.seconds
        detail = f"the request line and headers did not arrive within {seconds:g} s"
        _close(self.transport, _timeout_response(detail) if partial else None)

    def _body_overdue(self) -> None:
        self._end_body(self._body, f"the request body sent nothing for {self._body.seconds:g} s")

    def _body_too_slow(self) -> None:
        detail = (
            f"the request body arrived slower than {self._rate:g} bytes/s "
            f"(after its first {self._total.seconds:g} s)"
        )
        self._end_body(self._total, detail)

    def _end_body(self, deadline: _Deadline, detail: str) -> None:
        if self.conn.their_state is not h11.SEND_BODY:
            return
        cycle = self.cycle
        waiting = cycle is not None and cycle.waiting_for_100_continue
        if self.flow.read_paused or waiting:
            deadline.arm()  # the server is not reading, or the client waits for it: no stall
            return
        answered = cycle is None or cycle.response_started
        _close(self.transport, None if answered else _timeout_response(detail))


HeaderTimeoutProtocol: type[asyncio.Protocol] = HeaderTimeoutH11Protocol
"""The protocol class both servers run: h11's, also where httptools is installed (uvicorn's
``http="auto"`` would pick httptools there; one parser, the tested one, serves everywhere)."""
