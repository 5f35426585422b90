"""A hostile watch stream (SPEC §8.4) against the httpx transport: a real socket server on
127.0.0.1 that sends garbage, stalls, never ends an event or has no watch at all. Reads stay
bounded, the agent's requests keep working on response-time detection, and a ``WatchLost``
event says why; plus the bounded SSE parser, against a brute-force reference."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.events import WatchLost, WatchOpened
from invalidation_contracts.client.sse import SSEEvent, SSEParser, StreamViolation
from invalidation_contracts.httpx import WatchOptions, contract_client

pytestmark = pytest.mark.watch

CONTRACT = {
    "table_versions": {"plans": "1.0.0"},
    "rules_version": "r1",
    "contract_seq": 0,
    "contract_epoch": "e1",
}
OPTIONS = WatchOptions(
    stall_timeout_s=0.5,
    backoff_initial_s=0.05,
    backoff_max_s=0.2,
    max_line_bytes=256,
    max_event_bytes=1024,
)
SSE_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"


def _drip(conn: socket.socket, stop: threading.Event, chunk: bytes, every_s: float) -> None:
    while not stop.is_set():
        conn.sendall(chunk)
        stop.wait(every_s)


def _scenario(name: str, conn: socket.socket, stop: threading.Event) -> None:
    """What the hostile server sends on ``/contract/watch``."""
    if name == "no-watch":
        body = b'{"type":"about:blank","status":404}'
        conn.sendall(
            b"HTTP/1.1 404 Not Found\r\ncontent-type: application/problem+json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
        )
        return
    if name == "html":
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\nconnection: close\r\n\r\n<p>")
        return
    conn.sendall(SSE_HEAD)
    if name == "garbage":
        _drip(conn, stop, bytes(range(256)) * 4, 0.01)
    elif name == "endless-line":
        _drip(conn, stop, b"x" * 64, 0.01)
    elif name == "endless-event":
        _drip(conn, stop, b"data: still the same event\n" * 10, 0.01)
    elif name == "unknown-fields":
        _drip(conn, stop, b"noise: and more noise\n" * 10, 0.01)
    elif name == "slow-drip":
        _drip(conn, stop, b"d", 0.1)
    elif name == "stall":
        stop.wait(10)
    elif name == "bad-json":
        conn.sendall(b"event: versions\ndata: {not json\n\n")
        stop.wait(10)
    elif name == "bad-seq":
        conn.sendall(b'event: versions\ndata: {"contract_seq": -4, "contract_epoch": "e1"}\n\n')
        stop.wait(10)


@contextmanager
def hostile(name: str) -> Iterator[tuple[str, list[str]]]:
    """A real HTTP/1.1 server on 127.0.0.1: honest JSON answers, and scenario ``name`` on the
    watch. Yields its URL and the paths requested."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    stop = threading.Event()
    paths: list[str] = []
    threads: list[threading.Thread] = []

    def handle(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                part = conn.recv(4096)
                if not part:
                    return
                head += part
            start, _, rest = head.partition(b"\r\n\r\n")
            lines = start.decode("latin-1").split("\r\n")
            path = lines[0].split(" ")[1]
            paths.append(path)
            length = next(
                (int(h.split(":")[1]) for h in lines if h.lower().startswith("content-length")), 0
            )
            while len(rest) < length:
                rest += conn.recv(4096)
            try:
                if path.startswith("/contract/watch"):
                    _scenario(name, conn, stop)
                    return
                body = json.dumps(CONTRACT).encode()
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
                )
            except OSError:
                return

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            thread = threading.Thread(target=handle, args=(conn,), daemon=True)
            thread.start()
            threads.append(thread)

    acceptor = threading.Thread(target=serve, daemon=True)
    acceptor.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", paths
    finally:
        stop.set()
        acceptor.join(5)
        for thread in threads:
            thread.join(5)
        listener.close()


def _wait(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


TRANSIENT = {
    "garbage": "bound",
    "endless-line": "line",
    "endless-event": "without a complete event",
    "unknown-fields": "without a complete event",
    "slow-drip": "stalled",
    "stall": "ReadTimeout",
    "bad-json": "not JSON",
    "bad-seq": "contract_seq",
}


@pytest.mark.parametrize("scenario", sorted(TRANSIENT))
def test_a_hostile_stream_is_dropped_the_agent_keeps_working_and_an_event_says_why(scenario):
    memory = FixMemory("row")
    events: list = []
    with hostile(scenario) as (url, paths):
        with contract_client(memory, base_url=url, watch=OPTIONS, listener=events.append) as c:
            assert c.get("/v1/plans").status_code == 200
            _wait(lambda: any(isinstance(e, WatchLost) for e in events))
            for _ in range(3):  # response-time detection still serves the agent
                assert c.get("/v1/plans").status_code == 200
            _wait(lambda: paths.count("/v1/plans") == 4)
    (lost, *_) = [e for e in events if isinstance(e, WatchLost)]
    assert TRANSIENT[scenario] in lost.detail
    assert not lost.permanent and lost.retry_in_s is not None
    assert memory.position(url).seq == 0
    assert len([e for e in events if isinstance(e, WatchLost)]) == 1  # said once, not per retry
    assert not any(isinstance(e, WatchOpened) for e in events)  # a hostile stream never counts


@pytest.mark.parametrize("scenario", ["no-watch", "html"])
def test_a_server_without_a_watch_is_not_asked_again(scenario):
    memory = FixMemory("row")
    events: list = []
    with hostile(scenario) as (url, paths):
        with contract_client(memory, base_url=url, watch=OPTIONS, listener=events.append) as c:
            c.get("/v1/plans")
            _wait(lambda: any(isinstance(e, WatchLost) for e in events))
            time.sleep(0.5)  # several backoffs' worth
            c.get("/v1/plans")
    (lost,) = [e for e in events if isinstance(e, WatchLost)]
    assert lost.permanent and lost.retry_in_s is None
    assert sum(p.startswith("/contract/watch") for p in paths) == 1
    assert not any(isinstance(e, WatchOpened) for e in events)


def test_reconnection_backs_off_and_is_bounded():
    memory = FixMemory("row")
    with hostile("bad-json") as (url, paths):
        with contract_client(memory, base_url=url, watch=OPTIONS) as client:
            client.get("/v1/plans")
            time.sleep(1.5)
            attempts = sum(p.startswith("/contract/watch") for p in paths)
    # at most one try per 0.04 s of backoff (0.05 s less 20 % jitter), at least a retry
    assert 2 <= attempts <= 1.5 / 0.04


# -- the parser ----------------------------------------------------------------------------------


def _reference(stream: bytes) -> list[SSEEvent]:
    """The SSE dispatch rules, written out plainly over a whole stream."""
    events: list[SSEEvent] = []
    name, data, ident = "", [], None
    text = stream.decode().replace("\r\n", "\n").replace("\r", "\n")
    for line in text.split("\n")[:-1]:
        if line == "":
            if data:
                events.append(SSEEvent(name or "message", "\n".join(data), ident))
            name, data = "", []
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
            elif field == "id":
                ident = value
    return events


LINE = st.sampled_from(
    ["event: versions", "data: {}", "data: x", "id: 7", ": heartbeat", "retry: 5", "", "x: y"]
)


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(LINE, max_size=30),
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_the_parser_gives_the_reference_events_however_the_stream_is_cut(lines, newline, cuts):
    stream = "".join(line + newline for line in lines).encode()
    parser, got, start = SSEParser(), [], 0
    for cut in sorted({c for c in cuts if c < len(stream)}):
        got.extend(parser.feed(stream[start:cut]))
        start = cut
    got.extend(parser.feed(stream[start:]))
    assert got == _reference(stream)


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(st.binary(max_size=300), max_size=20))
def test_arbitrary_bytes_either_parse_or_raise_a_stream_violation_within_the_bounds(chunks):
    parser = SSEParser(max_line_bytes=128, max_event_bytes=512)
    try:
        for chunk in chunks:
            parser.feed(chunk)
            assert len(parser._buffer) <= 128
    except StreamViolation:
        pass


def test_a_line_over_the_bound_is_a_violation_even_when_it_ends():
    with pytest.raises(StreamViolation, match="line"):
        SSEParser(max_line_bytes=8).feed(b"data: 0123456789\n")


@pytest.mark.parametrize("scenario", ["garbage", "stall", "endless-event", "no-watch"])
def test_the_async_transport_survives_a_hostile_stream_too(scenario):
    import asyncio

    from invalidation_contracts.httpx import async_contract_client

    memory = FixMemory("row")
    events: list = []

    async def agent(url: str) -> list[int]:
        async with async_contract_client(  # a generous connect bound: the host may be loaded
            memory, base_url=url, watch=OPTIONS, listener=events.append, timeout=30.0
        ) as client:
            statuses = [(await client.get("/v1/plans")).status_code]
            for _ in range(1000):
                if any(isinstance(e, WatchLost) for e in events):
                    break
                await asyncio.sleep(0.01)
            statuses += [(await client.get("/v1/plans")).status_code for _ in range(2)]
            return statuses

    with hostile(scenario) as (url, _):
        statuses = asyncio.run(agent(url))
    assert statuses == [200, 200, 200]
    (lost, *_) = [e for e in events if isinstance(e, WatchLost)]
    assert lost.permanent == (scenario == "no-watch")
