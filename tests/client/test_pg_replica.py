"""The PostgreSQL fleet memory serves from its replica while LISTEN/NOTIFY says nothing changed
(issue 22): no round trip per lookup while the listening connection is up; a write by another
process reaches the replica before the next lookup; a terminated listening connection means
round trips (never a replica it cannot vouch for) until it is back, reconnected by itself.

Real PostgreSQL, real processes; faults: ``pg_terminate_backend`` of the listening connection,
with another process writing while it is down."""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

import pytest

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.stores import Store
from invalidation_contracts.client.values import Observed

pytestmark = pytest.mark.postgres

ORIGIN = "https://fleet.test"
REQUEST = {"item": "x"}
WAIT_S = 20.0


def failure(names: list[str], version: str = "1") -> dict[str, Any]:
    fixes = [
        {
            "type": name,
            "parameters": {"value": name},
            "action": "add_field",
            "cache_hint": "cacheable",
            "scope": REQUEST,
            "tables": [{"table": "t0", "version": version, "keys": [name]}],
        }
        for name in names
    ]
    return {
        "type": "urn:x:policy",
        "title": "t",
        "status": 422,
        "success": False,
        "recovery_feedback": {"suggestions": fixes},
        "table_versions": {"t0": version},
        "contract_seq": int(version),
        "contract_epoch": "e",
    }


class Counting(Store):
    """A real store, counting the batches (round trips) made through it."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.batches = inner, 0

    def batch(self, ops):
        self.batches += 1
        return self.inner.batch(ops)

    def version(self):
        return self.inner.version()

    def close(self) -> None:
        self.inner.close()


def open_memory(url: str, *, listen: bool = True) -> tuple[FixMemory, Counting]:
    from invalidation_contracts.client.stores import PostgresStore

    store = Counting(PostgresStore(url, listen=listen))
    return FixMemory("row", store=store, close_store=True), store


def listening(store: Counting) -> Any:
    listener = store.inner.listener
    assert listener.listening.wait(WAIT_S), "the listening connection never came up"
    return listener


def _store_in_another_process(url: str) -> None:
    from invalidation_contracts.client.stores import PostgresStore

    with FixMemory("row", store=PostgresStore(url, listen=False), close_store=True) as writer:
        writer.observe(ORIGIN, Observed(REQUEST, 422, failure(["W"])))


def _evict(url: str, entry_id: str) -> None:
    memory, _ = open_memory(url, listen=False)
    with memory:
        memory.evict(ORIGIN, entry_ids=[entry_id])


def evict_in_another_process(url: str, entry_id: str) -> None:
    process = multiprocessing.get_context("fork").Process(target=_evict, args=(url, entry_id))
    process.start()
    process.join(60)
    assert process.exitcode == 0


def served(memory: FixMemory) -> list[str]:
    return [e.id for e in memory.lookup(ORIGIN, REQUEST).entries]


def settled(memory: FixMemory, store: Counting) -> None:
    """Look up until a lookup asks the database nothing (the notifications of the memory's own
    writes, which may arrive after the listener came up, have been read)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        before = store.batches
        served(memory)
        if store.batches == before:
            return
        assert time.monotonic() < deadline, "every lookup keeps asking the database"


def terminate(url: str, pid: int) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)


def until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_fleet_memory_opened_with_defaults_sees_another_writers_entry(postgres_url):
    # The fast path is the default: a plain ``PostgresStore(url)`` listens, and a write by
    # another process still reaches its replica (the notification moves the token).
    from invalidation_contracts.client.stores import PostgresStore

    store = Counting(PostgresStore(postgres_url))
    with FixMemory("row", store=store, close_store=True) as memory:
        listening(store)
        assert served(memory) == []
        token = store.version()
        assert token is not None

        process = multiprocessing.get_context("fork").Process(
            target=_store_in_another_process, args=(postgres_url,)
        )
        process.start()
        process.join(60)
        assert process.exitcode == 0

        until(lambda: store.version() != token, "no notification of the other writer's commit")
        assert served(memory) == ["e1"]


def test_lookups_make_no_round_trip_while_the_listener_says_nothing_changed(postgres_url):
    memory, store = open_memory(postgres_url)
    with memory:
        memory.observe(ORIGIN, Observed(REQUEST, 422, failure(["A", "B"])))
        listening(store)
        settled(memory, store)
        before = store.batches
        for _ in range(50):
            assert served(memory) == ["e1", "e2"]
        assert store.batches == before


def test_without_the_listener_every_lookup_asks_the_database(postgres_url):
    memory, store = open_memory(postgres_url, listen=False)
    with memory:
        memory.observe(ORIGIN, Observed(REQUEST, 422, failure(["A"])))
        before = store.batches
        for _ in range(5):
            assert served(memory) == ["e1"]
        assert store.batches == before + 5
        assert store.version() is None


def test_another_processs_eviction_reaches_the_replica_before_the_next_lookup(postgres_url):
    memory, store = open_memory(postgres_url)
    with memory:
        memory.observe(ORIGIN, Observed(REQUEST, 422, failure(["A", "B"])))
        listening(store)
        assert served(memory) == ["e1", "e2"]
        token = store.version()

        evict_in_another_process(postgres_url, "e1")

        until(lambda: store.version() != token, "no notification of the other process's commit")
        assert served(memory) == ["e2"]


def test_a_terminated_listener_with_a_write_in_between_serves_nothing_stale(postgres_url):
    """Each round: the listening connection is terminated, another process evicts an entry
    while it is down, and the very next lookup does not serve it."""
    memory, store = open_memory(postgres_url)
    with memory:
        names = [f"F{n}" for n in range(5)]
        memory.observe(ORIGIN, Observed(REQUEST, 422, failure(names)))
        live = [f"e{n + 1}" for n in range(5)]
        for victim in list(live):
            listener = listening(store)
            assert served(memory) == live
            terminate(postgres_url, listener.backend_pid())
            evict_in_another_process(postgres_url, victim)
            live.remove(victim)
            assert served(memory) == live  # 0 stale serves
        assert store.inner.listener.drops == 5


def test_a_terminated_listener_means_round_trips_until_it_reconnects_by_itself(postgres_url):
    memory, store = open_memory(postgres_url)
    with memory:
        memory.observe(ORIGIN, Observed(REQUEST, 422, failure(["A"])))
        listener = listening(store)
        served(memory)
        pid = listener.backend_pid()

        terminate(postgres_url, pid)
        until(lambda: listener.backend_pid() != pid, "the listener did not notice")
        listening(store)  # back, by itself

        assert listener.drops == 1 and listener.backend_pid() != pid
        settled(memory, store)  # the new epoch: one look at the database, then none
        before = store.batches
        assert served(memory) == ["e1"]
        assert store.batches == before  # and replica reads again


def _token_in_child(store: Any, out: Any) -> None:
    out.put(store.inner.version())


def test_a_store_inherited_across_fork_vouches_for_nothing(postgres_url):
    """Its listening thread stayed in the parent: the child's copy has no token."""
    memory, store = open_memory(postgres_url)
    with memory:
        memory.observe(ORIGIN, Observed(REQUEST, 422, failure(["A"])))
        listening(store)
        until(lambda: store.version() is not None, "no token in the parent")
        context = multiprocessing.get_context("fork")
        out = context.Queue()
        child = context.Process(target=_token_in_child, args=(store, out))
        child.start()
        child.join(60)
        assert out.get(timeout=10) is None
        assert store.version() is not None


def test_two_listening_memories_of_one_process_see_each_others_writes_at_once(postgres_url):
    """No notification to wait for within a process: a write moves every token of that URL."""
    a, _ = open_memory(postgres_url)
    b, b_store = open_memory(postgres_url)
    with a, b:
        b.entries(ORIGIN)  # b is running before a learns
        a.observe(ORIGIN, Observed(REQUEST, 422, failure(["A"])))
        listening(b_store)
        settled(b, b_store)
        assert served(b) == ["e1"]

        a.evict(ORIGIN, entry_ids=["e1"])

        assert served(b) == []
