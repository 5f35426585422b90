"""The listening TCP socket both servers (``serve`` and ``serve-mcp``) bind before uvicorn runs.

Made with ``IPPROTO_TCP`` as uvicorn makes one: asyncio sets ``TCP_NODELAY`` on the connections of
such a socket only, and without it each keep-alive answer waits for Nagle's delayed ACK (about
44 ms; reliability audit 2, N6). Binding here makes a port in use an ``OSError`` for the caller,
not an exit inside uvicorn. Also the listener's header read timeout, its default and its check
(``header_timeout`` applies it). Standard library only, so either edge (and the CLI) may use it.
"""

from __future__ import annotations

import math
import socket

DEFAULT_HEADER_TIMEOUT_S = 10.0
"""Seconds a connection has to deliver a request's line and headers before it is closed (nginx
waits 60, Apache 20-40; 10 is ample for a client that is not stalling on purpose)."""
HEADER_TIMEOUT_ENV = "INVALIDATION_CONTRACTS_HEADER_TIMEOUT"
"""The header timeout of a server run by the uvicorn CLI with ``header_timeout``'s protocol."""
DEFAULT_BODY_TIMEOUT_S = 30.0
"""Seconds a request body may go without a byte while the server reads it."""
BODY_TIMEOUT_ENV = "INVALIDATION_CONTRACTS_BODY_TIMEOUT"
"""The body timeout of a server run by the uvicorn CLI with ``header_timeout``'s protocol."""


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
