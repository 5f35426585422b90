"""A client ahead of the server resyncs like a 410 (reliability audit 2, N8; SPEC §3.1).

A server whose history was restored answers, in the same epoch, at a seq behind the position the
client sent it (and it echoed). Nothing it says can be folded into what the client knows: the
memory resyncs, evicting every entry as ``resync``, and starts over from the full contract. An
older answer to a concurrent request is not this: its echo is its own, lower, position.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from tests.support.hostile_server import Answer, HostileServer
from tests.trust.test_hostile_sizes import failure, suggestion

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.events import Evicted, Stored
from invalidation_contracts.httpx import ContractTransport

ROUTE = "/v1/orders"
PROBLEM = {"content-type": "application/problem+json"}


def delta(seq: int, echoed: int) -> Answer:
    body = json.dumps({"success": True, "contract_seq": seq}).encode()
    return Answer(
        200, lambda: [body], {"content-type": "application/json", "Contract-Since": str(echoed)}
    )


def run(answers: list[Answer], n: int) -> tuple[list[Any], HostileServer]:
    events: list[Any] = []
    with HostileServer({ROUTE: answers}) as server:
        memory = FixMemory("row")
        transport = ContractTransport(memory, listener=events.append)
        with httpx.Client(transport=transport, base_url=server.origin) as client:
            for _ in range(n):
                client.post(ROUTE, json={"plan": "plan_a"})
    return events, server


def test_a_server_behind_the_position_it_echoed_makes_the_memory_resync():
    learn = Answer(422, lambda: [failure(suggestion(0), seq=5)], PROBLEM)
    events, server = run([learn, delta(3, echoed=5), delta(3, echoed=3)], 3)

    assert [e for e in events if isinstance(e, Stored)]
    assert [e.reason.value for e in events if isinstance(e, Evicted)] == ["resync"]
    sent = [headers.get("Contract-Since") for _, headers in server.requests]
    assert sent == [None, "5", None]  # the position is forgotten, the next answer is full


def test_an_older_answer_to_a_concurrent_request_is_not_a_resync():
    learn = Answer(422, lambda: [failure(suggestion(0), seq=5)], PROBLEM)
    events, _ = run([learn, delta(4, echoed=4), delta(5, echoed=5)], 3)

    assert not [e for e in events if isinstance(e, Evicted)]
