"""The listening TCP socket both servers (``serve`` and ``serve-mcp``) bind before uvicorn runs.

Made with ``IPPROTO_TCP`` as uvicorn makes one: asyncio sets ``TCP_NODELAY`` on the connections of
such a socket only, and without it each keep-alive answer waits for Nagle's delayed ACK (about
44 ms; reliability audit 2, N6). Binding here makes a port in use an ``OSError`` for the caller,
not an exit inside uvicorn. Also the listener's header read timeout, its default and its check
(``header_timeout`` applies it). Standard library only, so either edge (and the CLI) may use it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
from collections.abc import Callable
from typing import Any

DEFAULT_HEADER_TIMEOUT_S = 10.0
"""Seconds a connection has to deliver a request's line and headers before it is closed (nginx
waits 60, Apache 20-40; 10 is ample for a client that is not stalling on purpose)."""
HEADER_TIMEOUT_ENV = "INVALIDATION_CONTRACTS_HEADER_TIMEOUT"
"""The header timeout of a server run by the uvicorn CLI with ``header_timeout``'s protocol."""
DEFAULT_BODY_TIMEOUT_S = 30.0
"""Seconds a request body may go without a byte while the server reads it."""
BODY_TIMEOUT_ENV = "INVALIDATION_CONTRACTS_BODY_TIMEOUT"
"""The body timeout of a server run by the uvicorn CLI with ``header_timeout``'s protocol."""
DEFAULT_BODY_DEADLINE_S = 60.0
"""Seconds a request body has in all, plus one per ``DEFAULT_BODY_MIN_RATE`` bytes it sends: a
body trickled a byte at a time is cut off however often it sends."""
DEFAULT_BODY_MIN_RATE = 1024.0
"""Bytes a second a request body must average once its deadline's first part has passed (1 MiB,
the largest body, may take about 17 minutes at this rate)."""
DEFAULT_MAX_CONNECTIONS = 2048
"""Connections one worker holds at once; a connection beyond is answered 503 and closed."""


def header_timeout(value: object, what: str = "header") -> float:
    """``value`` as a positive, finite number of seconds; ``ValueError`` otherwise."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"the {what} timeout must be a positive number of seconds, not {value!r}")
    return seconds


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``SO_REUSEADDR``, backlog 2048)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except BaseException:
        sock.close()
        raise
    return sock


def raise_file_limit() -> tuple[int, int]:
    """Raise this process's open-file soft limit to its hard limit (each connection holds a
    descriptor; 1,024, a common default, is few for a server); the (soft, hard) limits now.
    A platform without ``resource`` keeps its limits, reported as (-1, -1)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return (-1, -1)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # e.g. an unlimited hard limit the kernel caps lower
            pass
    return (soft, hard)


_RESOURCE_ERROR = "socket.accept() out of system resource"


class RateLimitedLog:
    """An event loop's exception handler that logs running out of descriptors (asyncio reports
    it once per pending connection, each second) at most once a second, with a count of the
    reports it left out; every other error goes to the loop's default handler."""

    def __init__(
        self, interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._last = -math.inf
        self.suppressed = 0

    def handle(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if not str(context.get("message", "")).startswith(_RESOURCE_ERROR):
            loop.default_exception_handler(context)
            return
        now = self._clock()
        if now - self._last < self.interval_s:
            self.suppressed += 1
            return
        left_out, self.suppressed, self._last = self.suppressed, 0, now
        logging.getLogger("asyncio").error(
            "%s: %s (%d more such reports left out since the last); new connections wait",
            _RESOURCE_ERROR,
            context.get("exception"),
            left_out,
        )
