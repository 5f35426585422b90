"""Opening the proxy's memory (at start, so a file it cannot use is said before any host
connects) and serving the proxy over stdio or streamable HTTP."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import anyio
from mcp.server.lowlevel import Server

from ...client.memory import AsyncFixMemory, FixMemory
from ...client.shared.store import StoreError
from ...client.stores.sqlite import SQLiteStore
from ...sqlite_schema import SchemaMismatch
from ..http import HttpOptions
from ..serve import serve_server
from .host import proxy_server
from .link import LinkOptions, UpstreamLink
from .stdio import host_stdio
from .target import UpstreamTarget


class MemoryUnavailable(Exception):
    """The memory file cannot be opened or read (said at start, in one line)."""


def open_memory(path: Path, strategy: str, origin: str) -> FixMemory:
    """The memory in ``path``, opened and read once (its origin's position), so that a file
    that is not a fix memory, is unreadable or sits in a folder that cannot hold it fails now.
    The store is opened by hand: a file the user named is refused, never set aside as a damaged
    memory would be (``FixMemory(store=PATH)`` renames one it cannot open)."""
    try:
        store = SQLiteStore(path)
    except (OSError, sqlite3.Error, StoreError, SchemaMismatch) as exc:
        raise MemoryUnavailable(f"cannot open the memory {path}: {exc}") from exc
    try:
        memory = FixMemory(
            cast(Any, strategy), store=store, close_store=True
        )  # bad name: ValueError
    except BaseException as exc:
        store.close()
        if isinstance(exc, OSError | sqlite3.Error | StoreError | SchemaMismatch):
            raise MemoryUnavailable(f"cannot open the memory {path}: {exc}") from exc
        raise
    try:
        memory.position(origin)
    except (OSError, sqlite3.Error, StoreError, SchemaMismatch) as exc:
        memory.close()
        raise MemoryUnavailable(f"cannot read the memory {path}: {exc}") from exc
    return memory


def serve_proxy(
    target: UpstreamTarget,
    memory: FixMemory,
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 0,
    http: HttpOptions | None = None,
    options: LinkOptions | None = None,
    announce: Callable[[str], None] | None = None,
) -> None:
    """Serve the proxy of ``target`` over ``transport`` until the host (stdio) or a signal
    (HTTP) ends it; the memory stays open (the caller closes it)."""
    link = UpstreamLink(target, AsyncFixMemory.over(memory), _no_forward, options)
    server, _ = proxy_server(link)
    if transport == "stdio":
        anyio.run(_run_stdio, server)
        return
    serve_server(server, transport=transport, host=host, port=port, http=http, announce=announce)


async def _run_stdio(server: Server[Any]) -> None:
    """Serve one host over this process's stdin and stdout until it closes them (``stdio``:
    on the event loop, without the SDK's worker threads)."""
    async with host_stdio() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def _no_forward(message: object) -> None:  # replaced by the host's notifier
    return None
