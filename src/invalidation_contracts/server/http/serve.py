"""Running a service under uvicorn: one process, or ``workers`` processes on one listening socket.

The socket is bound here (so a port in use is an ``OSError`` for the caller, not an exit inside
uvicorn) as uvicorn binds it: ``IPPROTO_TCP`` and ``SO_REUSEADDR``. With protocol 0 asyncio never
sets ``TCP_NODELAY`` on accepted connections, and Nagle's algorithm meets the client's delayed ACK:
about 44 ms per keep-alive request. Several workers each build their app in their own process from
an app factory (``module:function``) and share the history through the store. Every connection
must deliver each request's head within ``header_timeout_s`` (``header_timeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import uvicorn
from starlette.types import ASGIApp

from ...header_timeout import server_config
from ...sockets import (
    DEFAULT_BODY_DEADLINE_S,
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    raise_file_limit,
)
from ...sockets import listen as tcp_listener
from .supervisor import Supervisor

#: Seconds a stopping server waits for open responses (watch streams never end by themselves).
GRACEFUL_SHUTDOWN_S = 5
#: Seconds a worker of ``serve --workers N`` has to start (and to answer a health check).
WORKER_START_TIMEOUT_S = 60
#: Seconds ``serving`` waits for uvicorn to listen.
START_TIMEOUT_S = 30.0


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket as uvicorn makes one (``TCP_NODELAY`` reaches every connection),
    inheritable by the worker processes."""
    sock = tcp_listener(host, port)
    sock.set_inheritable(True)
    return sock


def address_of(sock: socket.socket) -> str:
    """The ``http://host:port`` a listening socket answers at (IPv6 hosts in brackets)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(
    app: ASGIApp | str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    log_level: str = "info",
    factory: bool = False,
    listening: Callable[[str], None] | None = None,
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
    body_deadline_s: float = DEFAULT_BODY_DEADLINE_S,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    log_config: dict[str, Any] | None = None,
) -> None:
    """Run ``app`` until interrupted; ``OSError`` if ``host:port`` cannot be bound.

    ``app`` is an ASGI app, or (required for ``workers`` > 1) an import string ``module:attr``;
    with ``factory`` the attribute is called to build the app in each worker. ``listening`` is
    called with the bound address (``http://host:port``) before the first request is accepted.
    A connection that has not delivered a request's line and headers ``header_timeout_s`` after
    it opened (or after that request's first byte) is closed, as is one whose request body sends
    nothing for ``body_timeout_s`` while it is read, or is still unread ``body_deadline_s`` plus
    a second per 1,024 bytes after it began. Each
    worker holds at most ``max_connections`` connections (503 beyond). The open-file soft limit
    is raised to the hard limit first (the workers inherit it). ``log_config``: the
    ``logging.config`` dictionary each worker applies (None: uvicorn's plain lines; ``logs``).
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    if workers > 1 and not isinstance(app, str):
        raise ValueError("several workers build their own app: pass an import string")
    logging: dict[str, Any] = {} if log_config is None else {"log_config": log_config}
    config = server_config(
        app,
        header_timeout_s=header_timeout_s,  # ValueError before binding
        body_timeout_s=body_timeout_s,
        body_deadline_s=body_deadline_s,
        max_connections=max_connections,
        log_level=log_level,
        workers=workers,
        factory=factory,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        # uvicorn kills a worker not ready within this (default 5 s) and starts another: on a
        # loaded host every worker's start (imports, opening the registry) could take longer.
        timeout_worker_healthcheck=WORKER_START_TIMEOUT_S,
        **logging,
    )
    raise_file_limit()
    listener = listen(host, port)
    if listening is not None:
        listening(address_of(listener))
    with listener:
        if workers == 1:
            uvicorn.Server(config).run(sockets=[listener])
        else:
            Supervisor(config, sockets=[listener]).run()


@contextlib.asynccontextmanager
async def serving(app: ASGIApp, *, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn in this event loop on ``host:port`` (0: a free port) for the
    block; yields its address (``http://host:port``). For an in-process server that must stream
    (the watch stream, SPEC §8.4), which ``httpx.ASGITransport`` cannot: it buffers a whole body.
    """
    with listen(host, port) as listener:
        config = uvicorn.Config(
            app, log_level="warning", timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S
        )
        server = uvicorn.Server(config)
        task = asyncio.get_running_loop().create_task(server.serve(sockets=[listener]))
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                while not server.started:
                    if task.done():
                        task.result()  # uvicorn's own error, if it raised one
                        raise RuntimeError("the server stopped before it listened")
                    await asyncio.sleep(0.01)
            yield address_of(listener)
        finally:
            server.should_exit = True
            with contextlib.suppress(Exception):
                await task
