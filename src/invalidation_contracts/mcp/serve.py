"""Running a domain's MCP server: over stdio, or streamable HTTP on a socket it binds.

What ``invalidation-contracts serve-mcp`` runs. Without a store the domain is served from an
in-memory registry by a bare ``Provider``; with a store (``--db``: SQLite or PostgreSQL, shared
with other workers, HTTP ones included) or signing keys, by a ``ContractWorker`` (framework free:
no HTTP edge), which follows the shared history and pushes its moves to subscribed clients.
"""

from __future__ import annotations

import contextlib
import socket
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

import anyio

from ..server.domain import Domain
from ..server.provider import Provider
from ..server.trust import TrustOptions
from ..sockets import listen, raise_file_limit
from .backend import ContractBackend, ProviderBackend
from .http import ASGIApp, HttpOptions, http_app
from .server import contract_server, run_stdio

if TYPE_CHECKING:
    import uvicorn
    from mcp.server.lowlevel import Server

Announce = Callable[[str], None]
#: Seconds ``running_http`` waits for the server to listen.
START_TIMEOUT_S = 30.0


def open_backend(
    domain: Domain, *, level: int, store: str | None = None, trust: TrustOptions | None = None
) -> tuple[ContractBackend, Callable[[], None]]:
    """The backend to serve ``domain`` from, and how to close it."""
    if store is None and (trust is None or not trust.signing_keys):
        opaque = trust.opaque() if trust is not None else None
        return ProviderBackend(Provider(domain, level=level, opaque=opaque)), lambda: None
    from ..server.worker.contract import ContractWorker

    worker = ContractWorker.open(domain, level=level, store=store, trust=trust)
    worker.start()
    return worker, worker.close


def serve_mcp(
    backend: ContractBackend,
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    name: str | None = None,
    tool_names: Mapping[str, str] | None = None,
    announce: Announce | None = None,
    envelope: str = "meta",
    http: HttpOptions | None = None,
    protect_graph: bool = False,
    json_logs: bool = False,
) -> None:
    """Serve ``backend`` until the client (stdio) or a signal (HTTP) ends it.

    ``port`` 0 binds a free port; ``announce`` is told ``serving MCP at URL`` once the socket
    listens (default: a line on stderr). ``json_logs``: the process logs JSON lines already
    (``--log-format json``): uvicorn keeps that configuration and each request's W3C
    ``traceparent`` reaches the lines it logs. ``OSError`` if ``host:port`` cannot be bound.
    """
    server = contract_server(
        backend, name=name, tool_names=tool_names, envelope=envelope, protect_graph=protect_graph
    )
    serve_server(
        server,
        transport=transport,
        host=host,
        port=port,
        announce=announce,
        http=http,
        json_logs=json_logs,
    )


def serve_server(
    server: Server[Any],
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8000,
    announce: Announce | None = None,
    http: HttpOptions | None = None,
    json_logs: bool = False,
) -> None:
    """Serve any SDK ``Server`` as ``serve_mcp`` serves a domain's (the proxy serves its own
    so): over stdio until the client closes it, or streamable HTTP guarded by ``http``."""
    if transport == "stdio":
        anyio.run(run_stdio, server)
        return
    if transport != "http":
        raise ValueError(f"transport must be stdio or http, not {transport!r}")
    import uvicorn

    config = _uvicorn_config(server, host, http, json_logs=json_logs)  # ValueError before binding
    raise_file_limit()
    with listen(host, port) as listener:
        (announce or _stderr)(f"serving MCP at {_url(host, listener)}")
        uvicorn.Server(config).run(sockets=[listener])


def _uvicorn_config(
    server: Server[Any], host: str, http: HttpOptions | None, *, json_logs: bool = False
) -> uvicorn.Config:
    """The uvicorn configuration both entry points serve ``server`` with: the guarded app
    (``ValueError`` for options that cannot guard ``host``) under the read timeouts;
    ``json_logs``: keep the process's JSON logging (``serve``'s ``--log-format json`` path)."""
    from ..header_timeout import server_config
    from ..json_logs import RequestTrace

    options = http or HttpOptions()
    app: ASGIApp = http_app(server, host, options)
    logging: dict[str, Any] = {}
    if json_logs:
        app, logging["log_config"] = RequestTrace(app), None
    return server_config(
        app,
        header_timeout_s=options.header_timeout_s,
        body_timeout_s=options.body_timeout_s,
        body_deadline_s=options.body_deadline_s,
        max_connections=options.max_connections,
        log_level="warning",
        lifespan="on",
        **logging,
    )


@contextlib.asynccontextmanager
async def running_http(
    server: Server[Any],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    http: HttpOptions | None = None,
) -> AsyncIterator[str]:
    """Serve ``server`` (a ``contract_server``) over streamable HTTP in this event loop, on
    ``host:port`` (0: a free port), guarded by ``http`` (``mcp.http``); yields its URL, and
    stops it on exit."""
    import uvicorn

    config = _uvicorn_config(server, host, http)
    with listen(host, port) as listener:
        runner = uvicorn.Server(config)
        stopped = anyio.Event()

        async def serve() -> None:
            try:
                await runner.serve([listener])
            finally:
                stopped.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(serve)
            with anyio.fail_after(START_TIMEOUT_S):
                while not runner.started:
                    if stopped.is_set():
                        raise RuntimeError("the MCP server stopped before it listened")
                    await anyio.sleep(0.01)
            try:
                yield _url(host, listener)
            finally:
                runner.should_exit = True


def _url(host: str, listener: socket.socket) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{listener.getsockname()[1]}/mcp"


def _stderr(line: str) -> None:
    print(f"invalidation-contracts: {line}", file=sys.stderr, flush=True)


def parse_tool_names(pairs: list[str]) -> dict[str, str]:
    """``["POST /v1/subscriptions=create_subscription"]`` as ``{operation: tool name}``."""
    out: dict[str, str] = {}
    for pair in pairs:
        operation, sep, tool = pair.rpartition("=")
        if not sep or not operation.strip() or not tool.strip():
            raise ValueError(f"--tool-name takes OPERATION=NAME, not {pair!r}")
        out[operation.strip()] = tool.strip()
    return out
