"""The listening TCP socket both servers (``serve`` and ``serve-mcp``) bind before uvicorn runs.

Made with ``IPPROTO_TCP`` as uvicorn makes one: asyncio sets ``TCP_NODELAY`` on the connections of
such a socket only, and without it each keep-alive answer waits for Nagle's delayed ACK (about
44 ms; reliability audit 2, N6). Binding here makes a port in use an ``OSError`` for the caller,
not an exit inside uvicorn. Standard library only, so either edge may use it.
"""

from __future__ import annotations

import socket


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
