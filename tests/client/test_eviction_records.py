"""A large eviction recorded once (``client.shared.moves``, issue 22 item 8): one small record every
reader applies before serving, instead of a delete and a tombstone per entry — and the same
memory, entry for entry and tombstone for tombstone, as the eager rewrite (a brute-force oracle)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from invalidation_contracts.client import FixMemory, InMemoryStore, StoreError
from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.client.events import FetchChanges
from invalidation_contracts.client.limits import Limits
from invalidation_contracts.client.shared import moves as moves_module
from invalidation_contracts.client.shared.layout import TURN_KEY, namespace
from invalidation_contracts.client.shared.moves import EvictionRecord, Group
from invalidation_contracts.client.stores import CheckOp, PutOp
from invalidation_contracts.client.values import Answer, Observed

ORIGIN = "https://records.test"
REQUEST = {"item": "x"}
LIMITS = Limits(max_suggestions=1000, max_entries_per_origin=100_000, max_tombstones_per_origin=7)


class Server:
    """What the server says: a version per table and a position that moves with each version."""

    def __init__(self, tables: int = 2) -> None:
        self.versions = {f"t{n}": "1" for n in range(tables)}
        self.seq = 0
        self.fixes = 0

    def contract(self) -> dict:
        return {
            "table_versions": dict(self.versions),
            "contract_seq": self.seq,
            "contract_epoch": "e",
        }

    def move(self, table: str) -> None:
        self.versions[table] = str(int(self.versions[table]) + 1)
        self.seq += 1

    def failure(self, table: str, count: int) -> dict:
        fixes = []
        for _ in range(count):
            self.fixes += 1
            name = f"F{self.fixes}"
            fixes.append(
                {
                    "type": name,
                    "parameters": {"value": name},
                    "action": "add_field",
                    "cache_hint": "cacheable",
                    "scope": REQUEST,
                    "tables": [{"table": table, "version": self.versions[table], "keys": [name]}],
                }
            )
        return {
            "type": "urn:x:policy",
            "title": "t",
            "status": 422,
            "success": False,
            "recovery_feedback": {"suggestions": fixes},
            **self.contract(),
        }

    def success(self) -> dict:
        return {"success": True, **self.contract()}


@contextlib.contextmanager
def recording(minimum: int, sweep: int = moves_module.SWEEP_MAX) -> Iterator[None]:
    """Record evictions from ``minimum`` entries on (a huge one: the eager rewrite)."""
    saved = moves_module.RECORD_MIN, moves_module.SWEEP_MAX
    moves_module.RECORD_MIN, moves_module.SWEEP_MAX = minimum, sweep
    try:
        yield
    finally:
        moves_module.RECORD_MIN, moves_module.SWEEP_MAX = saved


def memory(store: InMemoryStore, clock=lambda: 1_000.0) -> FixMemory:
    return FixMemory("table", store=store, limits=LIMITS, clock=clock)


def seeded(store: InMemoryStore, server: Server, count: int) -> FixMemory:
    m = memory(store)
    m.observe(ORIGIN, Observed(REQUEST, 422, server.failure("t0", count)))
    return m


def items(store: InMemoryStore, part: str) -> list:
    return store.search(namespace(ORIGIN, part), limit=10**6)


# -- what is written -------------------------------------------------------------------------------


def test_a_version_move_of_many_entries_writes_one_record_and_no_tombstone_row():
    store, server = InMemoryStore(), Server()
    m = seeded(store, server, 100)
    server.move("t0")

    m.observe(ORIGIN, Observed(None, 200, server.success()))

    assert m.entries(ORIGIN) == []
    (record,) = items(store, "records")
    assert EvictionRecord.from_dict(record.value).groups[0].runs == ((1, 100),)
    assert items(store, "tombstones") == []
    assert len(items(store, "entries")) == 100  # dead rows, out of service


def test_a_small_eviction_is_still_written_entry_by_entry():
    store, server = InMemoryStore(), Server()
    m = seeded(store, server, 3)
    server.move("t0")

    m.observe(ORIGIN, Observed(None, 200, server.success()))

    assert items(store, "records") == []
    assert len(items(store, "tombstones")) == 3
    assert items(store, "entries") == []


def test_another_process_applies_the_record_before_it_serves():
    store, server = InMemoryStore(), Server()
    mover = seeded(store, server, 100)
    reader = memory(store)
    reader.observe(ORIGIN, Observed(None, 200, server.success()))
    assert len(reader.lookup(ORIGIN, REQUEST).entries) == 100
    server.move("t0")

    mover.observe(ORIGIN, Observed(None, 200, server.success()))

    assert list(reader.lookup(ORIGIN, REQUEST).entries) == []
    assert memory(store).entries(ORIGIN) == []  # and a process that loads the origin anew


def test_the_record_stands_for_the_tombstones_the_eager_rewrite_writes():
    lazy, eager = InMemoryStore(), InMemoryStore()
    for store, minimum in ((lazy, 64), (eager, 10**9)):
        server = Server()
        with recording(minimum):
            m = seeded(store, server, 100)
            server.move("t0")
            m.observe(ORIGIN, Observed(None, 200, server.success()))
    with recording(64):
        got = [t.to_dict() for t in memory(lazy).tombstones(ORIGIN)]
    want = [t.to_dict() for t in memory(eager).tombstones(ORIGIN)]
    assert got == want and len(got) == LIMITS.max_tombstones_per_origin
    assert {t["reason"] for t in got} == {EvictionReason.TABLE_CHANGED.value}


def test_later_commits_sweep_the_dead_rows_and_then_the_record():
    store, server = InMemoryStore(), Server()
    with recording(64, sweep=40):
        m = seeded(store, server, 100)
        server.move("t0")
        m.observe(ORIGIN, Observed(None, 200, server.success()))
        kept = LIMITS.max_tombstones_per_origin
        for _ in range(2):  # 93 rows below the floor, 40 a commit
            m.observe(ORIGIN, Observed(REQUEST, 422, server.failure("t1", 1)))
        assert len(items(store, "entries")) == 2 + 100 - 80
        m.observe(ORIGIN, Observed(REQUEST, 422, server.failure("t1", 1)))
        assert len(items(store, "entries")) == 3 + kept  # the rows kept tombstones stand on
        m.observe(ORIGIN, Observed(REQUEST, 422, server.failure("t1", 4)))
        server.move("t1")  # 7 more tombstones: every one of the record falls below the floor
        m.observe(ORIGIN, Observed(None, 200, server.success()))
        m.observe(ORIGIN, Observed(REQUEST, 422, server.failure("t0", 1)))
    assert items(store, "records") == []
    assert [e.type for e in m.entries(ORIGIN)] == [f"F{server.fixes}"]


def test_a_record_another_process_wrote_in_garbage_is_refused_not_served():
    store, server = InMemoryStore(), Server()
    seeded(store, server, 3)
    store.put(namespace(ORIGIN, "records"), "1", {"groups": "everything"})

    with pytest.raises(StoreError, match="cannot be read"):
        memory(store).entries(ORIGIN)


def test_runs_of_serials_keep_the_record_small():
    record = EvictionRecord(
        7, None, 1.0, (Group(EvictionReason.RESYNC, "lost", 10, ((1, 5000), (5002, 5003))),)
    )
    assert record.size == 5002 and record.last_sequence == 10 + 5002 - 1
    assert EvictionRecord.from_dict(record.to_dict()) == record
    assert len(str(record.to_dict())) < 200


# -- an eviction announced before it commits ---------------------------------------------------


def test_entries_an_uncommitted_eviction_announces_are_not_served():
    store, server = InMemoryStore(), Server()
    seeded(store, server, 3)
    reader = memory(store)
    reader.observe(ORIGIN, Observed(None, 200, server.success()))
    announced = EvictionRecord(
        1, None, 1.0, (Group(EvictionReason.TABLE_CHANGED, "t0 moved", 1, ((1, 2),)),)
    )
    turn = {"holder": "x", "host": "elsewhere", "pid": 1, "until": 4e9}
    meta = namespace(ORIGIN, "meta")
    store.batch(
        [
            CheckOp(meta, TURN_KEY, None),
            PutOp(meta, TURN_KEY, {**turn, "evicting": announced.to_dict()}),
        ]
    )

    assert [e.id for e in reader.lookup(ORIGIN, REQUEST).entries] == ["e3"]

    store.batch([PutOp(meta, TURN_KEY, None)])  # the holder gave up without committing
    assert [e.id for e in reader.lookup(ORIGIN, REQUEST).entries] == ["e1", "e2", "e3"]


# -- the brute-force oracle ----------------------------------------------------------------------

WRITERS = 2
step = st.one_of(
    st.tuples(st.just("learn"), st.integers(0, WRITERS - 1), st.integers(0, 1), st.integers(1, 6)),
    st.tuples(st.just("move"), st.integers(0, WRITERS - 1), st.integers(0, 1)),
    st.tuples(st.just("resync"), st.integers(0, WRITERS - 1)),
    st.tuples(st.just("evict"), st.integers(0, WRITERS - 1), st.integers(0, 1)),
    st.tuples(st.just("reopen"), st.integers(0, WRITERS - 1)),
)


class World:
    """Memories sharing one store, driven by one server; ``minimum``: the record threshold."""

    def __init__(self, minimum: int) -> None:
        self.minimum = minimum
        self.store = InMemoryStore()
        self.server = Server()
        self.now = 1_000.0
        self.memories = [self._open() for _ in range(WRITERS)]

    def _open(self) -> FixMemory:
        return memory(self.store, clock=lambda: self.now)

    def run(self, action: tuple, now: float) -> None:
        self.now = now
        m = self.memories[action[1]]
        with recording(self.minimum, sweep=3):
            if action[0] == "learn":
                m.observe(
                    ORIGIN, Observed(REQUEST, 422, self.server.failure(f"t{action[2]}", action[3]))
                )
            elif action[0] == "move":
                self.server.move(f"t{action[2]}")
                m.observe(ORIGIN, Observed(None, 200, self.server.success()))
            elif action[0] == "resync":
                m.answer(FetchChanges(ORIGIN, 0), Answer.resync())
            elif action[0] == "evict":
                m.evict(ORIGIN, table=f"t{action[2]}")
            else:
                m.close()
                self.memories[action[1]] = self._open()

    def view(self) -> tuple:
        with recording(self.minimum, sweep=3):
            live = [[e.to_dict() for e in m.entries(ORIGIN)] for m in self.memories]
            fresh = self._open()
            tombs = [t.to_dict() for t in fresh.tombstones(ORIGIN)]
            loaded = [e.to_dict() for e in fresh.entries(ORIGIN)]
        return live, loaded, tombs


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=st.lists(step, min_size=1, max_size=14))
def test_recorded_evictions_read_as_the_eager_rewrite(program):
    lazy, eager = World(minimum=2), World(minimum=10**9)
    for n, action in enumerate(program):
        for world in (lazy, eager):
            world.run(action, 1_000.0 + n)
        live, loaded, tombs = lazy.view()
        assert (live, loaded, tombs) == eager.view()
        assert all(memory_live == loaded for memory_live in live)
