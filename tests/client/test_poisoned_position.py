"""No poisoned position (reliability audit 2, N4 and N9), against a real server on 127.0.0.1.

One unsigned response used to plant a ``contract_epoch`` or ``contract_seq`` that every later
request echoed: a non-ASCII or CR-LF epoch made every request raise, a seq past 2^53−1 made every
request a 422, across restarts. The position is now checked on receipt by the server's rules
(``protocol.position``), a stored one that breaks them is dropped with an event, and a memory
that cannot write (disk full) reports it and still hands the agent the server's answer.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import httpx
import pytest
from tests.support.hostile_server import Answer, HostileServer
from tests.trust.test_hostile_sizes import failure, suggestion

from invalidation_contracts.client import FixMemory, Ignored, MemoryFailed, PositionDropped
from invalidation_contracts.client.events import Stored
from invalidation_contracts.client.shared.layout import namespace
from invalidation_contracts.client.shared.store import GetOp, PutOp
from invalidation_contracts.client.stores import SQLiteStore
from invalidation_contracts.httpx import ContractTransport
from invalidation_contracts.protocol.position import parse_seq, valid_epoch, valid_seq

ROUTE = "/v1/orders"
JSON = {"content-type": "application/json"}
PROBLEM = {"content-type": "application/problem+json"}

POISONS = {
    "non-ascii epoch": {"contract_epoch": "\u00e9poque"},
    "cr-lf epoch": {"contract_epoch": "ep\r\nX-Injected: 1"},
    "nul epoch": {"contract_epoch": "ep\u0000"},
    "space epoch": {"contract_epoch": "e p"},
    "empty epoch": {"contract_epoch": ""},
    "129-char epoch": {"contract_epoch": "e" * 129},
    "seq past 2^53-1": {"contract_seq": 2**60},
    "negative seq": {"contract_seq": -1},
    "string seq": {"contract_seq": "5"},
    "boolean seq": {"contract_seq": True},
    "float seq": {"contract_seq": 5.0},
}


def body(seq: int = 1, **fields: Any) -> bytes:
    base = {"success": True, "table_versions": {"codes": f"1.{seq}.0"}, "contract_seq": seq}
    return json.dumps({**base, "contract_epoch": "ep", **fields}).encode()


def answers(poison: dict[str, Any]) -> list[Answer]:
    out = [Answer(200, lambda: [body(1)], JSON), Answer(200, lambda: [body(2, **poison)], JSON)]
    return out + [Answer(200, lambda: [body(3)], JSON)]


def sent_positions(server: HostileServer) -> list[tuple[str | None, str | None]]:
    return [
        (headers.get("Contract-Epoch"), headers.get("Contract-Since"))
        for path, headers in server.requests
        if path.startswith(ROUTE)
    ]


def requests(memory: FixMemory, origin: str, n: int, events: list[Any]) -> list[int]:
    transport = ContractTransport(memory, listener=events.append)
    with httpx.Client(transport=transport, base_url=origin) as client:
        return [client.post(ROUTE, json={"plan": "plan_a"}).status_code for _ in range(n)]


@pytest.mark.parametrize("poison", list(POISONS.values()), ids=list(POISONS))
def test_a_poisoned_position_is_ignored_on_receipt_and_never_echoed(poison, tmp_path):
    events: list[Any] = []
    with HostileServer({ROUTE: answers(poison)}) as server:
        with FixMemory("row", store=tmp_path / "m.db") as memory:
            statuses = requests(memory, server.origin, 5, events)
        with FixMemory("row", store=tmp_path / "m.db") as memory:  # the agent restarts
            statuses += requests(memory, server.origin, 3, events)

    assert statuses == [200] * 8
    assert [e for e in events if isinstance(e, Ignored)]
    for epoch, since in sent_positions(server):
        assert epoch is None or valid_epoch(epoch)
        assert since is None or (parse_seq(since) is not None and int(since) <= 3)


def test_a_valid_position_is_still_echoed(tmp_path):
    with HostileServer({ROUTE: answers({})}) as server:
        with FixMemory("row", store=tmp_path / "m.db") as memory:
            requests(memory, server.origin, 3, [])

    assert sent_positions(server)[1:] == [("ep", "1"), ("ep", "2")]


def poison_stored_state(path: str, origin: str, **fields: Any) -> None:
    store = SQLiteStore(path)
    meta = namespace(origin, "meta")
    [item] = store.batch([GetOp(meta, "state")])
    assert item is not None
    store.batch([PutOp(meta, "state", {**item.value, **fields})])
    store.close()


@pytest.mark.parametrize(
    "fields",
    [{"epoch": "bad\r\nepoch"}, {"known_seq": 2**60}, {"synced_seq": -4}, {"known_seq": "7"}],
    ids=["cr-lf epoch", "seq past 2^53-1", "negative synced seq", "string seq"],
)
def test_a_stored_position_that_no_longer_validates_is_dropped_with_an_event(fields, tmp_path):
    path, events = str(tmp_path / "m.db"), []
    learn = [Answer(422, lambda: [failure(suggestion(0), seq=1)], PROBLEM)]
    with HostileServer({ROUTE: [*learn, Answer(200, lambda: [body(2)], JSON)]}) as server:
        with FixMemory("row", store=path) as memory:
            requests(memory, server.origin, 1, events)
        assert [e for e in events if isinstance(e, Stored)]
        poison_stored_state(path, server.origin, **fields)
        with FixMemory("row", store=path) as memory:
            statuses = requests(memory, server.origin, 3, events)
            state = memory.state(server.origin)

    assert statuses == [200] * 3
    assert [e for e in events if isinstance(e, PositionDropped)]
    assert valid_epoch(state.epoch) and valid_seq(state.known_seq)
    for epoch, since in sent_positions(server):
        assert epoch is None or valid_epoch(epoch)
        assert since is None or parse_seq(since) is not None


def test_a_full_disk_under_the_memory_is_an_event_and_the_agent_still_gets_the_answer(tmp_path):
    path, events = str(tmp_path / "m.db"), []
    fixes = [
        Answer(422, lambda n=n: [failure(suggestion(n, "V" * 3000))], PROBLEM) for n in range(40)
    ]
    with HostileServer({ROUTE: fixes}) as server:
        with FixMemory("row", store=path) as memory:
            db = memory.store._db  # type: ignore[attr-defined]
            pages = db.execute("PRAGMA page_count").fetchone()[0]
            db.execute(f"PRAGMA max_page_count = {pages + 4}")  # a real SQLITE_FULL
            statuses = requests(memory, server.origin, 30, events)
            failed = [e for e in events if isinstance(e, MemoryFailed)]
            db.execute("PRAGMA max_page_count = 1073741823")  # space freed
            statuses += requests(memory, server.origin, 2, events)

    assert statuses == [422] * 32
    assert failed and all("full" in e.detail for e in failed)
    assert not any("cannot rollback" in e.detail for e in failed)
    assert [e for e in events[len(events) - 8 :] if isinstance(e, Stored)]  # writes resumed
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
