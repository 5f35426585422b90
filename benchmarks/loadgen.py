"""A bounded, closed-loop HTTP/1.1 load generator for loopback servers, run in its own process.

It is deliberately small: keep-alive connections, one request in flight per connection, ``POST``
with a JSON body (or a bodiless ``GET``), a ``Content-Length`` response; with one connection, the
keep-alive latency probe (sequential requests on one socket). An httpx client costs the load
generator about three times the server's own time per request on this machine, which would make
the client the bottleneck on two cores and hide the server's cost; this one costs a few
microseconds.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

LOOPBACK = "127.0.0.1"


@dataclass(slots=True)
class Trial:
    """What one bounded load trial saw."""

    sent: int = 0
    wall_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    errors: int = 0
    timed_out: bool = False
    server_cpu_s: float | None = None
    """CPU time the server process used over the trial, where the study could read it."""

    @property
    def rps(self) -> float:
        return len(self.latencies_s) / self.wall_s if self.wall_s else 0.0

    @property
    def cpu_per_request_s(self) -> float | None:
        """Server CPU seconds per answered request (None when not measured)."""
        if self.server_cpu_s is None or not self.latencies_s:
            return None
        return self.server_cpu_s / len(self.latencies_s)

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run_trial(
    port: int,
    path: str,
    bodies: Sequence[bytes],
    requests: int,
    concurrency: int,
    time_limit_s: float,
    method: str = "POST",
) -> Trial:
    """Send ``requests`` POSTs (cycling ``bodies``) to ``127.0.0.1:port``; stop at ``time_limit_s``.

    ``method="GET"`` sends bodiless GETs instead (``bodies`` is then ignored).
    """
    prepared = (
        [_request(path, body) for body in bodies] if method == "POST" else [_get_request(path)]
    )
    return asyncio.run(_trial(port, prepared, requests, concurrency, time_limit_s))


def wait_ready(port: int, timeout_s: float = 30.0) -> None:
    """Block until an HTTP server answers on ``127.0.0.1:port``; ``TimeoutError`` otherwise."""
    asyncio.run(_wait_ready(port, timeout_s))


async def _wait_ready(port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            reader, writer = await asyncio.open_connection(LOOPBACK, port)
            writer.write(b"GET /contract/rules HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            await writer.drain()
            await asyncio.wait_for(_read_response(reader), 5)
            writer.close()
            return
        except (TimeoutError, OSError, asyncio.IncompleteReadError):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no server answered on {LOOPBACK}:{port} within {timeout_s}s"
                ) from None
            await asyncio.sleep(0.1)


async def _trial(
    port: int,
    prepared: Sequence[bytes],
    requests: int,
    concurrency: int,
    time_limit_s: float,
) -> Trial:
    trial = Trial()
    tickets = iter(range(requests))
    deadline = time.perf_counter() + time_limit_s
    start = time.perf_counter()
    stopped = await asyncio.gather(
        *(_connection(trial, port, prepared, tickets, deadline) for _ in range(concurrency))
    )
    trial.wall_s = time.perf_counter() - start
    trial.timed_out = any(stopped)
    return trial


def run_side_by_side(
    ports: Sequence[int], path: str, bodies: Sequence[bytes], concurrency: int, duration_s: float
) -> list[Trial]:
    """Load every server in ``ports`` at once for ``duration_s``: ``concurrency`` connections
    each, all cycling ``bodies`` as POSTs. One trial per server, all over the same window, so the
    servers are compared under the same machine conditions."""
    prepared = [_request(path, body) for body in bodies]
    return asyncio.run(_side_by_side(ports, prepared, concurrency, duration_s))


async def _side_by_side(
    ports: Sequence[int], prepared: Sequence[bytes], concurrency: int, duration_s: float
) -> list[Trial]:
    trials = [Trial() for _ in ports]
    counters = [itertools.count() for _ in ports]
    start = time.perf_counter()
    deadline = start + duration_s
    await asyncio.gather(
        *(
            _connection(trial, port, prepared, counter, deadline)
            for trial, port, counter in zip(trials, ports, counters, strict=True)
            for _ in range(concurrency)
        )
    )
    wall = time.perf_counter() - start
    for trial in trials:
        trial.wall_s = wall
    return trials


async def _connection(
    trial: Trial, port: int, prepared: Sequence[bytes], tickets: Iterator[int], deadline: float
) -> bool:
    """Send requests on one keep-alive connection until ``tickets`` or time runs out; True if
    time did."""
    reader, writer = await asyncio.open_connection(LOOPBACK, port)
    try:
        for i in tickets:
            if time.perf_counter() > deadline:
                return True
            trial.sent += 1
            start = time.perf_counter()
            try:
                writer.write(prepared[i % len(prepared)])
                await writer.drain()
                status = await _read_response(reader)
            except (OSError, asyncio.IncompleteReadError, ValueError):
                trial.errors += 1
                writer.close()
                reader, writer = await asyncio.open_connection(LOOPBACK, port)
                continue
            trial.latencies_s.append(time.perf_counter() - start)
            trial.statuses[status] = trial.statuses.get(status, 0) + 1
        return False
    finally:
        writer.close()


def _request(path: str, body: bytes) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {LOOPBACK}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode("ascii") + body


def _get_request(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nhost: {LOOPBACK}\r\n\r\n".encode("ascii")


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return status
