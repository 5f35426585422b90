"""A server that trickles its answer (issue 38, H8): the memory's own reading for one agent
request — the body it reads for the contract and the feed fetches that response leads to — ends
at ``Limits.max_read_seconds``. Past it the body is left to the agent (a ``Refused`` event, its
bytes unchanged) and an unfinished feed fetch is abandoned as a network error is (a
``FetchFailed`` event; the need stays outstanding). Real hostile server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
from tests.support.hostile_server import Answer, HostileServer
from tests.trust.test_hostile_encodings import (
    DRAFT,
    JSON,
    PROBLEM,
    ROUTE,
    honest,
    refusals,
    success,
)

from invalidation_contracts.client import FetchFailed, FixMemory, Limits
from invalidation_contracts.httpx import AsyncContractTransport, ContractTransport

LIMITS = Limits(max_read_seconds=1)
BOUND_S = 20.0  # a bound on the test, not a timing: the trickle below lasts 60 s


def trickle(head: bytes, pause: float = 0.3, count: int = 200) -> Iterator[bytes]:
    """``head``, then one byte every ``pause`` seconds (``count`` of them): 60 s in all."""
    yield head
    for _ in range(count):
        time.sleep(pause)
        yield b" "


def slow(status: int, headers: dict[str, str]) -> Answer:
    head = json.dumps({"success": status < 400})[:-1].encode()  # never closes: never JSON
    return Answer(status, lambda: trickle(head), headers, chunked=True)


def bounded(call: Any) -> Any:
    """``call()`` in a thread, waited for ``BOUND_S`` at most: its result, or a failure."""
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(call()), daemon=True)
    worker.start()
    worker.join(BOUND_S)
    assert out, f"still reading after {BOUND_S} s"
    return out[0]


def test_a_trickled_body_is_left_to_the_agent_at_the_deadline():
    events: list[Any] = []
    with (
        HostileServer({ROUTE: [slow(422, PROBLEM)]}) as server,
        FixMemory("row", limits=LIMITS) as m,
    ):

        def streamed() -> httpx.Response:
            transport = ContractTransport(m, listener=events.append)
            with httpx.Client(transport=transport, base_url=server.origin, timeout=5) as client:
                response = client.send(client.build_request("POST", ROUTE, json=DRAFT), stream=True)
                response.close()
                return response

        response = bounded(streamed)

    assert response.status_code == 422 and refusals(events) == ["max_read_seconds"]


def test_a_trickled_changes_feed_is_abandoned_at_the_deadline_and_stays_outstanding():
    events: list[Any] = []
    answers = {ROUTE: [honest(), success()], "/contract/changes": [slow(200, JSON)]}
    with HostileServer(answers) as server, FixMemory("row", limits=LIMITS) as m:
        transport = ContractTransport(m, listener=events.append)
        with httpx.Client(transport=transport, base_url=server.origin, timeout=5) as client:
            client.post(ROUTE, json=DRAFT)
            bounded(lambda: client.post(ROUTE, json=DRAFT))
        (failed,) = [e for e in events if isinstance(e, FetchFailed)]
        assert "max_read_seconds" in failed.detail and m.needs(server.origin)


def test_the_async_transport_stops_reading_a_trickled_body_at_the_deadline():
    events: list[Any] = []

    async def streamed(origin: str, memory: FixMemory) -> httpx.Response:
        transport = AsyncContractTransport(memory, listener=events.append)
        async with httpx.AsyncClient(transport=transport, base_url=origin, timeout=5) as client:
            request = client.build_request("POST", ROUTE, json=DRAFT)
            response = await client.send(request, stream=True)
            await response.aclose()
            return response

    with (
        HostileServer({ROUTE: [slow(422, PROBLEM)]}) as server,
        FixMemory("row", limits=LIMITS) as m,
    ):
        response = bounded(lambda: asyncio.run(streamed(server.origin, m)))

    assert response.status_code == 422 and refusals(events) == ["max_read_seconds"]
