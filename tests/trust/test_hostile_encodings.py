"""Bounds that hold after decoding (reliability audit 2, N1 and N5), against a real hostile
server on 127.0.0.1.

A compressed body is counted in decoded bytes as it streams: a gzip (or deflate, or doubly
encoded) bomb is decoded only up to the cap, plain or chunked, and a body nested deeper than
``max_json_depth`` is refused before it is parsed. Every refusal is a ``Refused`` event and an
observation that learns nothing; the agent's call never raises and the agent still gets the
server's answer, its bytes unchanged (``REFUSED_EXTENSION`` names the bound).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import tracemalloc
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.support.hostile_server import Answer, HostileServer, bomb, nested
from tests.trust.test_hostile_sizes import failure, suggestion

from invalidation_contracts.client import FixMemory, Limits, Refused
from invalidation_contracts.client.events import Evicted, Stored
from invalidation_contracts.httpx import (
    REFUSED_EXTENSION,
    AsyncContractTransport,
    ContractTransport,
)

ROUTE = "/v1/orders"
DRAFT = {"plan": "plan_a"}
PROBLEM = {"content-type": "application/problem+json"}
JSON = {"content-type": "application/json"}
BOMB = 64 << 20  # decoded bytes of each bomb; the body cap is 1 MiB


def success(seq: int = 1, version: str = "2.0.0") -> Answer:
    body = {"success": True, "table_versions": {"codes": version}, "contract_seq": seq}
    return Answer(200, lambda: [json.dumps({**body, "contract_epoch": "ep"}).encode()], JSON)


def honest() -> Answer:
    return Answer(422, lambda: [failure(suggestion(0))], PROBLEM)


def refusals(events: list[Any]) -> list[str]:
    return [e.bound for e in events if isinstance(e, Refused)]


def send(server: HostileServer, memory: FixMemory, events: list[Any]) -> httpx.Response:
    """The agent's call, streamed (it reads nothing itself): what the transport reads is all."""
    transport = ContractTransport(memory, listener=events.append)
    with httpx.Client(transport=transport, base_url=server.origin) as client:
        request = client.build_request("POST", ROUTE, json=DRAFT)
        response = client.send(request, stream=True)
        response.close()
        return response


def peak_of(call: Any) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        result = call()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    return bomb(BOMB)


def bomb_answer(body: bytes, encoding: str, chunked: bool) -> Answer:
    def chunks() -> Iterator[bytes]:
        for start in range(0, len(body), 16 * 1024):
            yield body[start : start + 16 * 1024]

    headers = {**PROBLEM, "content-encoding": encoding}
    return Answer(422, chunks, headers, chunked=chunked)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_gzip_bomb_is_decoded_only_up_to_the_body_cap(gzip_bomb, chunked):
    memory, events = FixMemory("row"), []
    with HostileServer({ROUTE: [bomb_answer(gzip_bomb, "gzip", chunked)]}) as server:
        response, peak = peak_of(lambda: send(server, memory, events))

    assert response.status_code == 422
    assert refusals(events) == ["max_body_bytes"]
    assert response.extensions[REFUSED_EXTENSION].bound == "max_body_bytes"
    assert peak < 8 << 20, f"{peak} bytes allocated for a {BOMB}-byte bomb"
    assert memory.entries(server.origin) == []


@pytest.mark.parametrize(
    ("encoding", "layers", "header", "bound"),
    [
        ("deflate", 1, "deflate", "max_body_bytes"),
        ("gzip", 2, "gzip, gzip", "max_decoding_ratio"),  # ~10^6 decoded bytes per byte sent
    ],
    ids=["deflate", "gzip-twice"],
)
def test_other_encodings_are_bounded_alike(encoding, layers, header, bound):
    memory, events = FixMemory("row"), []
    body = bomb(BOMB, encoding, layers)
    answer = bomb_answer(body, encoding, chunked=True)
    answer.headers["content-encoding"] = header
    with HostileServer({ROUTE: [answer]}) as server:
        _, peak = peak_of(lambda: send(server, memory, events))

    assert refusals(events) == [bound]
    assert peak < 8 << 20


def test_a_ratio_past_the_bound_is_refused_under_a_raised_cap(gzip_bomb):
    memory = FixMemory("row", limits=Limits(max_body_bytes=1 << 30, max_decoding_ratio=100))
    events: list[Any] = []
    with HostileServer({ROUTE: [bomb_answer(gzip_bomb, "gzip", chunked=True)]}) as server:
        _, peak = peak_of(lambda: send(server, memory, events))

    assert refusals(events) == ["max_decoding_ratio"]
    assert peak < 8 << 20


def test_the_agent_still_gets_the_servers_bytes_after_a_refusal():
    memory, events = FixMemory("row", limits=Limits(max_body_bytes=4096)), []
    body = failure(*(suggestion(n) for n in range(64)))
    compressed = gzip.compress(body)
    answer = Answer(422, lambda: [compressed], {**PROBLEM, "content-encoding": "gzip"})
    with HostileServer({ROUTE: [answer]}) as server:
        transport = ContractTransport(memory, listener=events.append)
        with httpx.Client(transport=transport, base_url=server.origin) as client:
            response = client.post(ROUTE, json=DRAFT)

    assert refusals(events) == ["max_body_bytes"]
    assert response.content == body


def test_a_compressed_body_within_the_bounds_is_read_and_learned():
    memory, events = FixMemory("row"), []
    body = failure(suggestion(0))
    answer = Answer(422, lambda: [gzip.compress(body)], {**PROBLEM, "content-encoding": "gzip"})
    with HostileServer({ROUTE: [answer]}) as server:
        transport = ContractTransport(memory, listener=events.append)
        with httpx.Client(transport=transport, base_url=server.origin) as client:
            response = client.post(ROUTE, json=DRAFT)

    assert response.content == body and refusals(events) == []
    assert [e for e in events if isinstance(e, Stored)]


def test_a_body_that_does_not_decode_is_left_to_the_agent_without_an_exception():
    memory, events = FixMemory("row"), []
    answer = Answer(
        422, lambda: [b"\x1f\x8bnot gzip at all"], {**PROBLEM, "content-encoding": "gzip"}
    )
    with HostileServer({ROUTE: [answer]}) as server:
        response = send(server, memory, events)

    assert response.status_code == 422 and refusals(events) == []
    assert memory.entries(server.origin) == []


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_deeply_nested_body_on_a_domain_route_is_refused_before_parsing(chunked):
    memory, events = FixMemory("row"), []
    answer = Answer(422, lambda: [nested(500_000)], PROBLEM, chunked=chunked)
    with HostileServer({ROUTE: [answer]}) as server:
        transport = ContractTransport(memory, listener=events.append)
        with httpx.Client(transport=transport, base_url=server.origin) as client:
            response = client.post(ROUTE, json=DRAFT)

    assert response.status_code == 422 and len(response.content) == 1_000_000
    assert refusals(events) == ["max_json_depth"]
    refused = next(e for e in events if isinstance(e, Refused))
    assert refused.cap == 128 and refused.actual == 500_000


def test_a_body_nested_within_the_bound_is_read():
    memory, events = FixMemory("row"), []
    body = json.loads(failure(suggestion(0)))
    body["deep"] = json.loads(nested(100))
    answer = Answer(422, lambda: [json.dumps(body).encode()], PROBLEM)
    with HostileServer({ROUTE: [answer]}) as server:
        transport = ContractTransport(memory, listener=events.append)
        with httpx.Client(transport=transport, base_url=server.origin) as client:
            client.post(ROUTE, json=DRAFT)

    assert refusals(events) == [] and [e for e in events if isinstance(e, Stored)]


def feed_run(feed: Answer) -> tuple[list[Any], FixMemory, str]:
    """Learn a fix, then see its table move: the memory fetches the (hostile) changes feed."""
    memory, events = FixMemory("row"), []
    with HostileServer({ROUTE: [honest(), success()], "/contract/changes": [feed]}) as server:
        transport = ContractTransport(memory, listener=events.append)
        with httpx.Client(transport=transport, base_url=server.origin) as client:
            client.post(ROUTE, json=DRAFT)
            client.post(ROUTE, json=DRAFT)
        return events, memory, server.origin


def test_a_deeply_nested_changes_feed_is_refused_and_costs_a_resync():
    events, memory, origin = feed_run(Answer(200, lambda: [nested(500_000)], JSON, chunked=True))

    assert refusals(events) == ["max_json_depth"]
    assert [e.reason.value for e in events if isinstance(e, Evicted)] == ["resync"]
    assert memory.entries(origin) == []


def test_a_gzip_bomb_on_the_changes_feed_is_decoded_only_up_to_the_feed_cap(gzip_bomb):
    feed = bomb_answer(gzip_bomb, "gzip", chunked=True)
    feed.status, feed.headers = 200, {**JSON, "content-encoding": "gzip"}
    (events, memory, origin), peak = peak_of(lambda: feed_run(feed))

    assert refusals(events) == ["max_feed_bytes"]
    assert [e.reason.value for e in events if isinstance(e, Evicted)] == ["resync"]
    assert peak < 16 << 20


def test_the_async_transport_bounds_a_gzip_bomb_alike(gzip_bomb):
    memory, events = FixMemory("row"), []

    async def run(origin: str) -> tuple[httpx.Response, int]:
        transport = AsyncContractTransport(memory, listener=events.append)
        async with httpx.AsyncClient(transport=transport, base_url=origin) as client:
            request = client.build_request("POST", ROUTE, json=DRAFT)
            tracemalloc.start()
            response = await client.send(request, stream=True)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            await response.aclose()
            return response, peak

    with HostileServer({ROUTE: [bomb_answer(gzip_bomb, "gzip", chunked=True)]}) as server:
        response, peak = asyncio.run(run(server.origin))

    assert response.status_code == 422 and refusals(events) == ["max_body_bytes"]
    assert peak < 8 << 20


def test_the_async_transport_refuses_a_deeply_nested_body():
    memory, events = FixMemory("row"), []

    async def run(origin: str) -> httpx.Response:
        transport = AsyncContractTransport(memory, listener=events.append)
        async with httpx.AsyncClient(transport=transport, base_url=origin) as client:
            return await client.post(ROUTE, json=DRAFT)

    with HostileServer({ROUTE: [Answer(422, lambda: [nested(500_000)], PROBLEM)]}) as server:
        response = asyncio.run(run(server.origin))

    assert response.status_code == 422 and refusals(events) == ["max_json_depth"]
