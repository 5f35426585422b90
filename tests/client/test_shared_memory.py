"""One memory store shared by processes, threads and memories: nothing lost, nothing stale.

The property tests run agents concurrently against one store and check them against the
brute-force model of ``shared_model``; the example tests pin each guarantee on its own.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.client.shared_model import (
    ORIGIN,
    call,
    check_against_the_model,
    contract,
    fix,
    history,
    run_processes,
    run_threads,
)

from invalidation_contracts.client import (
    AsyncFixMemory,
    FixMemory,
    InMemoryStore,
    SQLiteStore,
    StoreError,
)
from invalidation_contracts.client.events import Stored
from invalidation_contracts.client.stores import Store
from invalidation_contracts.client.values import Answer, Observed

scripts = st.lists(st.lists(call, min_size=8, max_size=30), min_size=3, max_size=3)
CONCURRENT = settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def failure(i: int, seq: int = 0) -> dict:
    return {
        "type": "urn:x:policy",
        "title": "t",
        "status": 422,
        "success": False,
        "recovery_feedback": {"suggestions": [fix(i, seq)]},
        **contract(seq),
    }


def success(seq: int = 0) -> dict:
    return {"success": True, **contract(seq)}


# -- the model, under real concurrency


@CONCURRENT
@given(scripts=scripts, steps=history)
def test_processes_sharing_a_sqlite_file_lose_nothing_and_serve_nothing_stale(scripts, steps):
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "memory.sqlite"
        SQLiteStore(path).close()
        records = run_processes(
            lambda: SQLiteStore(path, synchronous="NORMAL"), scripts, steps, Path(work)
        )
        with FixMemory("row", store=SQLiteStore(path), close_store=True) as reader:
            check_against_the_model(records, reader)


@pytest.mark.postgres
def test_processes_sharing_a_postgresql_database_lose_nothing_and_serve_nothing_stale(
    postgres_url,
):
    from invalidation_contracts.client.stores import PostgresStore

    PostgresStore(postgres_url, listen=False).close()

    @settings(CONCURRENT, max_examples=15)
    @given(scripts=scripts, steps=history)
    def run(scripts, steps):
        with tempfile.TemporaryDirectory() as work:
            with PostgresStore(postgres_url, listen=False) as store:
                _wipe(store)
            records = run_processes(
                lambda: PostgresStore(postgres_url, listen=False), scripts, steps, Path(work)
            )
            with FixMemory(
                "row", store=PostgresStore(postgres_url, listen=False), close_store=True
            ) as reader:
                check_against_the_model(records, reader)

    run()


@CONCURRENT
@given(scripts=scripts, steps=history)
def test_threads_sharing_one_memory_lose_nothing_and_serve_nothing_stale(scripts, steps):
    with tempfile.TemporaryDirectory() as work:
        with FixMemory("row", store=Path(work) / "m.sqlite") as memory:
            records = run_threads([memory], scripts, steps, Path(work))
            check_against_the_model(records, memory)


@CONCURRENT
@given(scripts=scripts, steps=history)
def test_memories_sharing_one_store_in_a_process_lose_nothing_and_serve_nothing_stale(
    scripts, steps
):
    with tempfile.TemporaryDirectory() as work:
        store = InMemoryStore()
        memories = [FixMemory("row", store=store) for _ in scripts]
        records = run_threads(memories, scripts, steps, Path(work))
        check_against_the_model(records, FixMemory("row", store=store))


def _wipe(store: Store) -> None:
    from invalidation_contracts.client.stores import PutOp

    items = store.search(("invalidation-contracts",), limit=10**9)
    store.batch([PutOp(item.namespace, item.key, None) for item in items])


# -- each guarantee on its own


@pytest.fixture
def two(tmp_path):
    """Two memories on one SQLite file, each with its own connection (as two processes have)."""
    path = tmp_path / "m.sqlite"
    a = FixMemory("row", store=SQLiteStore(path), close_store=True)
    b = FixMemory("row", store=SQLiteStore(path), close_store=True)
    yield a, b
    a.close()
    b.close()


def test_two_writers_never_issue_the_same_id(two):
    a, b = two
    a.entries(ORIGIN)
    b.entries(ORIGIN)  # both hold a replica before either writes

    first = a.observe(ORIGIN, Observed(None, 422, failure(0))).of(Stored)
    second = b.observe(ORIGIN, Observed(None, 422, failure(1))).of(Stored)

    assert [e.entry_id for e in first + second] == ["e1", "e2"]
    assert {e.id for e in a.entries(ORIGIN)} == {e.id for e in b.entries(ORIGIN)} == {"e1", "e2"}


class _Racing(InMemoryStore):
    """Runs ``before_write`` just before this store's next write batch commits."""

    def __init__(self, inner: InMemoryStore) -> None:
        super().__init__()
        self.inner = inner
        self.before_write = None

    def batch(self, ops):
        ops = list(ops)
        if self.before_write is not None and any(type(op).__name__ == "PutOp" for op in ops):
            race, self.before_write = self.before_write, None
            race()
        return self.inner.batch(ops)

    def version(self):
        return self.inner.version()


def test_a_write_that_loses_a_race_is_recomputed_on_what_the_winner_committed():
    shared = InMemoryStore()
    a = FixMemory("row", store=shared)
    racing = _Racing(shared)
    b = FixMemory("row", store=racing)
    racing.before_write = lambda: a.observe(ORIGIN, Observed(None, 422, failure(0)))

    stored = b.observe(ORIGIN, Observed(None, 422, failure(1))).of(Stored)

    assert [e.entry_id for e in stored] == ["e2"]
    assert [e.id for e in FixMemory("row", store=shared).entries(ORIGIN)] == ["e1", "e2"]


def test_a_memory_serves_what_another_stored(two):
    a, b = two
    b.lookup(ORIGIN, {"item": "s0"})

    a.observe(ORIGIN, Observed(None, 422, failure(0)))

    assert [e.id for e in b.lookup(ORIGIN, {"item": "s0"}).entries] == ["e1"]


def test_a_memory_never_serves_what_another_evicted(two):
    a, b = two
    b.entries(ORIGIN)  # b is running (it has confirmed the origin) before a learns
    a.observe(ORIGIN, Observed(None, 422, failure(0)))
    assert [e.id for e in b.lookup(ORIGIN, {"item": "s0"}).entries] == ["e1"]

    a.evict(ORIGIN, entry_ids=["e1"])

    assert list(b.lookup(ORIGIN, {"item": "s0"}).entries) == []


def test_a_memory_sees_another_memorys_restamp(two):
    a, b = two
    b.entries(ORIGIN)  # b is running (it has confirmed the origin) before a learns
    a.observe(ORIGIN, Observed(None, 422, failure(1)))
    b.entries(ORIGIN)
    moved = {"success": True, **contract(1)}
    touch = {
        "contract_epoch": "shared-epoch",
        "since": 0,
        "last_seq": 1,
        "tables": [
            {"seq": 1, "table": "t0", "old_version": "1.0.0", "new_version": "1.0.1", "touch": True}
        ],
    }

    (need,) = a.observe(ORIGIN, Observed(None, 200, moved)).needs
    a.answer(need, Answer(200, touch))

    (entry,) = b.lookup(ORIGIN, {"item": "s1"}).entries
    assert entry.dependencies[0].version == "1.0.1" and entry.restamps == 1


def test_a_read_that_changes_nothing_writes_nothing(tmp_path):
    store = SQLiteStore(tmp_path / "m.sqlite")
    with FixMemory("row", store=store, close_store=True) as memory:
        memory.observe(ORIGIN, Observed(None, 422, failure(0)))
        before = store.version()

        for _ in range(5):
            memory.lookup(ORIGIN, {"item": "s0"})
            memory.observe(ORIGIN, Observed(None, 200, success()))

        assert store.version() == before
        stats = memory.stats(ORIGIN)
        assert (stats.lookups, stats.hits, stats.responses) == (5, 5, 6)


def test_counters_are_written_with_the_next_real_write(tmp_path):
    path = tmp_path / "m.sqlite"
    with FixMemory("row", store=path) as memory:
        memory.lookup(ORIGIN, {"item": "s0"})
        memory.observe(ORIGIN, Observed(None, 422, failure(0)))
        with FixMemory("row", store=SQLiteStore(path), close_store=True) as other:
            assert other.stats(ORIGIN).lookups == 1


def test_counters_not_yet_written_are_written_on_close(tmp_path):
    path = tmp_path / "m.sqlite"
    with FixMemory("row", store=path) as memory:
        memory.observe(ORIGIN, Observed(None, 422, failure(0)))
        memory.lookup(ORIGIN, {"item": "s0"})

    with FixMemory("row", store=path) as reopened:
        assert (reopened.stats(ORIGIN).lookups, reopened.stats(ORIGIN).hits) == (1, 1)


class _FailingWrites(InMemoryStore):
    """A store whose writes fail while ``broken`` is set (a full disk, a lost connection)."""

    broken = False

    def batch(self, ops):
        ops = list(ops)
        if self.broken and any(type(op).__name__ == "PutOp" for op in ops):
            raise StoreError("disk full")
        return super().batch(ops)


def test_a_failed_write_leaves_the_memory_as_it_was():
    store = _FailingWrites()
    memory = FixMemory("row", store=store)
    memory.observe(ORIGIN, Observed(None, 422, failure(0)))
    before = (memory.entries(ORIGIN), memory.state(ORIGIN))

    store.broken = True
    with pytest.raises(StoreError, match="disk full"):
        memory.evict(ORIGIN, everything=True)
    with pytest.raises(StoreError, match="disk full"):
        memory.observe(ORIGIN, Observed(None, 422, failure(1)))

    assert (memory.entries(ORIGIN), memory.state(ORIGIN)) == before
    store.broken = False
    assert memory.observe(ORIGIN, Observed(None, 422, failure(1))).of(Stored)[0].entry_id == "e2"


def test_the_async_memory_shares_the_store_with_a_sync_one(tmp_path):
    path = tmp_path / "m.sqlite"
    sync = FixMemory("row", store=SQLiteStore(path), close_store=True)

    async def agent():
        memory = AsyncFixMemory("row", store=SQLiteStore(path), close_store=True)
        learned = await memory.observe(ORIGIN, Observed(None, 422, failure(0)))
        sync.evict(ORIGIN, entry_ids=["e1"])
        served = list((await memory.lookup(ORIGIN, {"item": "s0"})).entries)
        await memory.close()
        return learned, served

    learned, served = asyncio.run(agent())

    assert [e.entry_id for e in learned.of(Stored)] == ["e1"] and served == []
    assert [t.reason.value for t in sync.tombstones(ORIGIN)] == ["operator"]
    sync.close()


def test_an_operator_eviction_is_seen_by_a_running_agent(tmp_path):
    from invalidation_contracts.cli import operator

    path = tmp_path / "m.sqlite"
    with FixMemory("row", store=path) as agent:
        agent.observe(ORIGIN, Observed(None, 422, failure(0)))
        assert agent.lookup(ORIGIN, {"item": "s0"}).entries

        assert operator.evict(path, ORIGIN, entry_ids=["e1"]) == ["e1"]

        assert list(agent.lookup(ORIGIN, {"item": "s0"}).entries) == []


@pytest.mark.postgres
def test_an_async_memory_and_a_sync_one_share_a_postgresql_database(postgres_url):
    from invalidation_contracts.client.stores import PostgresStore

    sync = FixMemory("row", store=PostgresStore(postgres_url, listen=False), close_store=True)

    async def agent():
        memory = AsyncFixMemory(
            "row", store=PostgresStore(postgres_url, listen=False), close_store=True
        )
        learned = await memory.observe(ORIGIN, Observed(None, 422, failure(0)))
        before = list((await memory.lookup(ORIGIN, {"item": "s0"})).entries)
        sync.evict(ORIGIN, entry_ids=["e1"])
        after = list((await memory.lookup(ORIGIN, {"item": "s0"})).entries)
        await memory.close()
        return learned, before, after

    learned, before, after = asyncio.run(agent())

    assert [e.entry_id for e in learned.of(Stored)] == ["e1"]
    assert [e.id for e in before] == ["e1"] and after == []
    assert sync.stats(ORIGIN).lookups == 2
    sync.close()
