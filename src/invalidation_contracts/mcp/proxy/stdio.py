"""The host's stdio for the proxy, read and written on the event loop itself.

The SDK's ``stdio_server`` reads stdin and writes stdout through worker threads (two thread
hops a request: each wakes a thread and then the loop again, and on a loaded machine each
wake-up waits for a core). The proxy sits on the host's every call, so when stdin and stdout are
pipes or sockets (as a host spawns it) it hands the SDK asyncio pipe streams instead: the same
framing (``stdio_server`` with explicit streams), no threads. Like the SDK, it keeps the wire to
itself: fd 0 reads the null device and fd 1 writes to stderr while it serves, so a stray
``print`` or an upstream child never writes into the host's stream; both are restored on exit.
Anything else (a terminal, a regular file) is served by the SDK's own ``stdio_server``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

from mcp.server.stdio import stdio_server

#: The longest line the host may send (the SDK's threaded reader has no bound; this one errs
#: on a line longer, which no tool call comes near).
MAX_LINE_BYTES = 1 << 30

Streams = tuple[Any, Any]


class _Lines:
    """stdin as ``stdio_server`` reads it: an async iterator of text lines."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class _Writer:
    """stdout as ``stdio_server`` writes it: ``write`` then ``flush`` (which waits for the
    pipe to take the bytes, so a slow host applies back-pressure)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()


def _streamable(fd: int) -> bool:
    """Whether ``fd`` is a pipe or a socket (what the loop can watch without a thread; on
    POSIX only)."""
    if sys.platform == "win32":
        return False
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _claim(fd: int, diversion: Callable[[], int]) -> tuple[int, Callable[[], None]]:
    """A private duplicate of ``fd`` to serve the wire on, ``fd`` pointed at ``diversion``
    meanwhile, and how to point it back."""
    import fcntl  # POSIX: _streamable said so

    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    diverted = diversion()
    try:
        os.dup2(diverted, fd)
    finally:
        os.close(diverted)

    def restore() -> None:
        with contextlib.suppress(OSError):
            os.dup2(private, fd)

    return private, restore


def _stderr_or_null() -> int:
    try:
        return os.dup(2)
    except OSError:
        return os.open(os.devnull, os.O_WRONLY)


@contextlib.asynccontextmanager
async def host_stdio() -> AsyncIterator[Streams]:
    """The SDK's read and write streams over this process's stdin and stdout."""
    if not (_streamable(0) and _streamable(1)):
        async with stdio_server() as streams:
            yield streams
        return
    loop = asyncio.get_running_loop()
    with contextlib.ExitStack() as claims:
        stdin_fd, restore_stdin = _claim(0, lambda: os.open(os.devnull, os.O_RDONLY))
        claims.callback(restore_stdin)
        stdout_fd, restore_stdout = _claim(1, _stderr_or_null)
        claims.callback(restore_stdout)
        reader = asyncio.StreamReader(limit=MAX_LINE_BYTES, loop=loop)
        read_pipe, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader, loop=loop),
            os.fdopen(stdin_fd, "rb", buffering=0),
        )
        claims.callback(read_pipe.close)
        write_pipe, flow = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(stdout_fd, "wb", buffering=0)
        )
        claims.callback(write_pipe.close)
        writer = asyncio.StreamWriter(write_pipe, flow, None, loop)
        lines, out = cast(Any, _Lines(reader)), cast(Any, _Writer(writer))
        async with stdio_server(stdin=lines, stdout=out) as streams:
            yield streams
