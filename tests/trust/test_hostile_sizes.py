"""A hostile server's sizes, through the shipped transport: refused, reported, bounded.

The three inputs of the reliability audit (D5): one 422 carrying 20,001 suggestions, a 10 MB
parameter value, and a 60 MB ``/contract/changes`` answer — the last one asked for by the memory
itself. Each is refused with a ``Refused`` event and a log record; nothing of it is stored or
injected, and the feed is read only up to the cap.
"""

from __future__ import annotations

import json
import logging
import tracemalloc
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from invalidation_contracts.client import FixMemory, Limits, Refused
from invalidation_contracts.client.events import Evicted, Stored
from invalidation_contracts.httpx import ContractTransport

ORIGIN = "http://hostile.test"
ROUTE = "/v1/orders"
OPERATION = f"POST {ROUTE}"
DRAFT = {"plan": "plan_a"}
CHUNK = 64 * 1024


def suggestion(n: int, value: Any = None) -> dict[str, Any]:
    return {
        "type": f"FIX_{n}",
        "parameters": {"promo_code": value if value is not None else f"CODE{n}"},
        "action": "add_field",
        "cache_hint": "cacheable",
        "scope": {"plan": "plan_a"},
        "tables": [{"table": "codes", "version": "1.0.0", "keys": ["plan_a"]}],
    }


def failure(*suggestions: dict[str, Any], seq: int = 0, version: str = "1.0.0") -> bytes:
    body = {
        "type": "urn:invalidation-contracts:problem:policy-violation",
        "title": "Policy violation",
        "status": 422,
        "success": False,
        "recovery_feedback": {"suggestions": list(suggestions)},
        "table_versions": {"codes": version},
        "contract_seq": seq,
        "contract_epoch": "ep",
    }
    return json.dumps(body).encode()


class Feed(httpx.SyncByteStream):
    """A ``/contract/changes`` answer of ``size`` bytes, made chunk by chunk as it is read."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.sent = 0

    def __iter__(self) -> Iterator[bytes]:
        head = b'{"contract_epoch":"ep","since":0,"last_seq":1,"rows":['
        yield head
        self.sent += len(head)
        row = b'{"seq":1,"table":"codes","key":"k","op":"changed","old_version":"1",' + (
            b'"new_version":"2"},'
        )
        while self.sent < self.size:
            chunk = row * (CHUNK // len(row))
            self.sent += len(chunk)
            yield chunk


class Hostile(httpx.BaseTransport):
    """The domain route answers ``domain`` (then a success that moves ``codes``); the changes
    feed is ``feed``."""

    def __init__(self, domain: bytes, feed: Feed | None = None) -> None:
        self.domain = domain
        self.feed = feed
        self.calls = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/contract/changes" and self.feed is not None:
            return httpx.Response(
                200, headers={"content-type": "application/json"}, stream=self.feed
            )
        self.calls += 1
        if self.calls == 1:
            return httpx.Response(
                422, content=self.domain, headers={"content-type": "application/problem+json"}
            )
        body = {
            "success": True,
            "table_versions": {"codes": "2.0.0"},
            "contract_seq": 1,
            "contract_epoch": "ep",
        }
        return httpx.Response(200, json=body)


def run(memory: FixMemory, transport: Hostile, requests: int = 1) -> list[Any]:
    events: list[Any] = []
    client = httpx.Client(
        transport=ContractTransport(memory, transport, listener=events.append), base_url=ORIGIN
    )
    with client:
        for _ in range(requests):
            client.post(ROUTE, json=DRAFT)
    return events


def refused(events: list[Any]) -> list[tuple[str, int | None]]:
    return [(e.bound, e.cap) for e in events if isinstance(e, Refused)]


def test_a_422_with_20001_suggestions_stores_nothing():
    memory = FixMemory("row")

    events = run(memory, Hostile(failure(*(suggestion(n) for n in range(20_001)))))

    assert refused(events) == [("max_body_bytes", 1 << 20)]
    assert memory.entries(ORIGIN) == []


def test_a_422_with_20001_suggestions_under_a_raised_body_cap_stores_nothing():
    memory = FixMemory("row", limits=Limits(max_body_bytes=64 << 20))

    events = run(memory, Hostile(failure(*(suggestion(n) for n in range(20_001)))))

    assert refused(events) == [("max_suggestions", 64)]
    assert memory.entries(ORIGIN) == [] and not [e for e in events if isinstance(e, Stored)]


@pytest.mark.parametrize("raised", [False, True])
def test_a_10_mb_parameter_is_never_stored_or_injected(raised):
    limits = Limits(max_body_bytes=64 << 20, max_suggestion_bytes=64 << 20) if raised else None
    memory = FixMemory("row", limits=limits)

    events = run(memory, Hostile(failure(suggestion(0, value="X" * 10_000_000))))

    assert refused(events) == (
        [("max_parameter_bytes", 4096)] if raised else [("max_body_bytes", 1 << 20)]
    )
    assert list(memory.lookup(ORIGIN, DRAFT, operation=OPERATION).entries) == []


def test_a_60_mb_changes_feed_is_read_only_up_to_the_cap_and_costs_a_resync(caplog):
    memory = FixMemory("row")
    feed = Feed(60 * 1024 * 1024)

    with caplog.at_level(logging.WARNING, logger="invalidation_contracts.client"):
        events = run(memory, Hostile(failure(suggestion(0)), feed), requests=2)

    assert feed.sent <= memory.limits.max_feed_bytes + 2 * CHUNK
    assert refused(events) == [("max_feed_bytes", 4 << 20)]
    assert [e.reason.value for e in events if isinstance(e, Evicted)] == ["resync"]
    assert memory.entries(ORIGIN) == []
    assert any("max_feed_bytes" in r.getMessage() for r in caplog.records)


def test_a_60_mb_changes_feed_costs_the_agent_the_feed_cap_once():
    memory = FixMemory("row")
    run(memory, Hostile(failure(suggestion(0)), Feed(1024)), requests=2)  # warm every code path
    memory = FixMemory("row")
    transport = Hostile(failure(suggestion(0)), Feed(60 * 1024 * 1024))

    tracemalloc.start()
    try:
        run(memory, transport, requests=2)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert peak <= memory.limits.max_feed_bytes + 16 * CHUNK  # not the raw and decoded copies


def test_a_feed_within_the_cap_is_read_whole():
    memory = FixMemory("row")
    feed = Feed(1024)

    events = run(memory, Hostile(failure(suggestion(0)), feed), requests=2)

    assert refused(events) == [] and feed.sent >= 1024


class Chunked(httpx.SyncByteStream):
    """A JSON body without ``Content-Length``, made chunk by chunk as it is read."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.sent = 0

    def __iter__(self) -> Iterator[bytes]:
        for start in range(0, len(self.body), CHUNK):
            self.sent += CHUNK
            yield self.body[start : start + CHUNK]


class ChunkedHostile(httpx.BaseTransport):
    def __init__(self, body: bytes) -> None:
        self.stream = Chunked(body)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "application/problem+json"}
        return httpx.Response(422, headers=headers, stream=self.stream)


def test_a_chunked_body_over_the_cap_is_left_unparsed_and_still_reaches_the_agent_whole():
    memory = FixMemory("row", limits=Limits(max_body_bytes=256 * 1024))
    body = failure(*(suggestion(n) for n in range(20_001)))
    transport = ChunkedHostile(body)
    events: list[Any] = []
    client = httpx.Client(
        transport=ContractTransport(memory, transport, listener=events.append), base_url=ORIGIN
    )
    with client, client.stream("POST", ROUTE, json=DRAFT) as response:
        pulled_before_the_agent_reads = transport.stream.sent
        received = response.read()

    assert pulled_before_the_agent_reads <= 256 * 1024 + CHUNK
    assert refused(events) == [("max_body_bytes", 256 * 1024)]
    assert received == body and memory.entries(ORIGIN) == []


def test_a_chunked_body_within_the_cap_is_read_for_the_memory():
    memory = FixMemory("row")
    body = failure(suggestion(0))
    client = httpx.Client(
        transport=ContractTransport(memory, ChunkedHostile(body)), base_url=ORIGIN
    )

    with client:
        response = client.post(ROUTE, json=DRAFT)

    assert response.content == body
    assert [e.type for e in memory.entries(ORIGIN)] == ["FIX_0"]


def test_the_async_transport_also_leaves_a_chunked_body_over_the_cap_to_the_agent():
    import asyncio

    from invalidation_contracts.httpx import AsyncContractTransport

    body = failure(*(suggestion(n) for n in range(20_001)))

    class AsyncChunked(httpx.AsyncByteStream):
        sent = 0

        async def __aiter__(self):
            for start in range(0, len(body), CHUNK):
                AsyncChunked.sent += CHUNK
                yield body[start : start + CHUNK]

    class Transport(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request):
            headers = {"content-type": "application/problem+json"}
            return httpx.Response(422, headers=headers, stream=AsyncChunked())

    memory = FixMemory("row", limits=Limits(max_body_bytes=256 * 1024))
    events: list[Any] = []

    async def run() -> tuple[int, bytes]:
        transport = AsyncContractTransport(memory, Transport(), listener=events.append)
        async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as client:
            async with client.stream("POST", ROUTE, json=DRAFT) as response:
                pulled = AsyncChunked.sent
                return pulled, await response.aread()

    pulled, received = asyncio.run(run())

    assert pulled <= 256 * 1024 + CHUNK and received == body
    assert refused(events) == [("max_body_bytes", 256 * 1024)]
