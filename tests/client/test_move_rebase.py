"""A large eviction computed outside the origin's turn and rebased over the small commits made in
between (``client.shared.rebase``, issue 38): the writers never wait for the eviction to be
computed again, and the memory ends as a sequential run of the same calls in commit order does —
the same fixes stored, the same evictions. Several memories share one store (as processes do);
their calls interleave at every store batch, in an order hypothesis picks."""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.client import Evicted, FixMemory, InMemoryStore, Observation
from invalidation_contracts.client import calls as memory_calls
from invalidation_contracts.client.limits import Limits
from invalidation_contracts.client.shared import moves as moves_module
from invalidation_contracts.client.shared.layout import TURN_KEY
from invalidation_contracts.client.shared.rebase import merge_state
from invalidation_contracts.client.shared.steps import Wait
from invalidation_contracts.client.state import OriginState
from invalidation_contracts.client.stores import CheckOp, StoreError
from invalidation_contracts.client.transaction import CallRunner
from invalidation_contracts.client.values import Observed

ORIGIN = "https://rebase.test"
DRAFT = {"sku": "s1"}
SEEDED = 6
LIMITS = Limits(max_suggestions=1000, max_entries_per_origin=100_000)


def response(fixes: list[tuple[str, str]], moved: bool = False) -> dict[str, Any]:
    """A 422 teaching ``fixes`` (name, table), at the old contract or the moved one."""
    return {
        "type": "urn:x",
        "title": "t",
        "status": 422,
        "success": False,
        "recovery_feedback": {
            "suggestions": [
                {
                    "type": name,
                    "action": "add_field",
                    "parameters": {"note": name},
                    "cache_hint": "cacheable",
                    "scope": DRAFT,
                    "tables": [{"table": table, "version": "1", "keys": [name]}],
                }
                for name, table in fixes
            ]
        },
        "table_versions": {"catalog": "2" if moved else "1", "side": "1"},
        "contract_seq": 1 if moved else 0,
        "contract_epoch": "e",
    }


def observed(fixes: list[tuple[str, str]], moved: bool = False) -> Observed:
    return Observed(DRAFT, 422, response(fixes, moved))


@contextlib.contextmanager
def recording(minimum: int) -> Iterator[None]:
    saved = moves_module.RECORD_MIN
    moves_module.RECORD_MIN = minimum
    try:
        yield
    finally:
        moves_module.RECORD_MIN = saved


def memory(store: InMemoryStore) -> FixMemory:
    return FixMemory("table", store=store, limits=LIMITS, clock=lambda: 1_000.0)


def seeded(store: InMemoryStore) -> FixMemory:
    first = memory(store)
    first.observe(ORIGIN, observed([(f"c{n}", "catalog") for n in range(SEEDED)]), operation="op")
    return first


#: A call: the move, or a writer's fix (its name and table).
Call = tuple[str, str]


def steps(m: FixMemory, call: Call) -> Generator[Any, Any, Observation]:
    name, table = call
    if name == "evict":  # an operator eviction of the table beside the move
        return memory_calls.evict(m._core, ORIGIN, table=table)
    return memory_calls.observe(m._core, ORIGIN, steps_observed(call), operation="op")


def sequential_run(m: FixMemory, call: Call) -> Observation:
    name, table = call
    if name == "evict":
        return m.evict(ORIGIN, table=table)
    return m.observe(ORIGIN, steps_observed(call), operation="op")


def answer(store: InMemoryStore, task: Generator[Any, Any, Any], effect: Any) -> Any:
    """Answer one of ``task``'s effects from ``store`` (a wait at once, a batch with its result or
    its error); the task's next effect, or StopIteration when it returns."""
    if isinstance(effect, Wait):
        return task.send([])
    try:
        result = store.batch(effect)
    except StoreError as exc:
        return task.throw(exc)
    return task.send(result)


def interleave(
    store: InMemoryStore, tasks: list[Generator[Any, Any, Any]], order: list[int]
) -> list[int]:
    """Drive every task one store batch at a time, in ``order`` (then round robin); the tasks'
    indices in the order they returned (each call's last batch is its commit)."""
    pending = {i: (task, next(task)) for i, task in enumerate(tasks)}
    done: list[int] = []
    picks = iter(order)
    turn = 0
    while pending:
        pick = next(picks, None)
        if pick is None:
            pick, turn = turn, turn + 1
        i = sorted(pending)[pick % len(pending)]
        task, effect = pending.pop(i)
        try:
            effect = answer(store, task, effect)
        except StopIteration as stop:
            tasks[i] = stop.value
            done.append(i)
            continue
        pending[i] = (task, effect)
    return done


def outcome(m: FixMemory, observations: list[Observation]) -> tuple[list[str], list[tuple], list]:
    """The live fixes, the evictions the calls reported, and the tombstones as numbered."""
    tombs = sorted((t.sequence, t.entry.key.type, t.reason.value) for t in m.tombstones(ORIGIN))
    evicted = [
        (e.key.type, e.reason.value)
        for obs in observations
        for e in obs.events
        if isinstance(e, Evicted)
    ]
    return sorted(e.key.type for e in m.entries(ORIGIN)), sorted(evicted), tombs


writes = st.lists(
    st.tuples(st.sampled_from(["side", "side", "catalog", "evict"]), st.integers(0, 1)),
    min_size=1,
    max_size=4,
)


@settings(max_examples=40, deadline=None)
@given(writes, st.lists(st.integers(0, 7), max_size=60))
def test_writers_interleaved_with_a_move_end_as_the_sequential_run_in_commit_order(writes, order):
    with recording(3):
        calls: list[Call] = [("move", "")] + [
            (f"w{n}", table) for n, (table, _) in enumerate(writes)
        ]
        store = InMemoryStore()
        seeded(store).close()
        writers = [memory(store), memory(store)]
        mover = memory(store)
        owners = [mover] + [writers[w] for _, w in writes]
        tasks: list[Any] = [steps(m, c) for m, c in zip(owners, calls, strict=True)]
        committed = interleave(store, tasks, order)
        reader = memory(store)
        got = outcome(reader, tasks)

        oracle_store = InMemoryStore()
        sequential = seeded(oracle_store)
        runs = [sequential_run(sequential, calls[i]) for i in committed]
        expected = outcome(sequential, runs)
        for m in (*writers, mover, reader, sequential):
            m.close()

    assert got == expected
    assert not any(name.startswith("c") for name in got[0])  # the move evicted every seeded fix


def steps_observed(call: Call) -> Observed:
    name, table = call
    return observed([], moved=True) if name == "move" else observed([(name, table)])


# -- the rebase, step by step ----------------------------------------------------------------


def _is_write(effect: Any) -> bool:
    """A batch that takes the turn or commits (a writer cannot commit past a turn held)."""
    return any(isinstance(op, CheckOp) and op.key in ("generation", TURN_KEY) for op in effect)


def _full_computes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The index size of every call computed from here on (the move's is the seeded count)."""
    sizes: list[int] = []
    compute = CallRunner._compute

    def spy(self, replica, *args, **kwargs):  # type: ignore[no-untyped-def]
        sizes.append(len(replica.index))
        return compute(self, replica, *args, **kwargs)

    monkeypatch.setattr(CallRunner, "_compute", spy)
    return sizes


def _move_past(store: InMemoryStore, writer_fix: Call, sizes: list[int]) -> list[Observation]:
    """The move computed; a writer commits ``writer_fix`` before the move takes its turn; the
    move finishes. The two observations."""
    mover, writer = memory(store), memory(store)
    task = steps(mover, ("move", ""))
    effect = next(task)
    while True:
        ops = list(effect)
        if _is_write(ops):
            break
        effect = task.send(store.batch(ops))
    wrote = sequential_run(writer, writer_fix)
    sizes.clear()
    moved = _finish(store, task, ops)
    mover.close()
    writer.close()
    return [moved, wrote]


def _finish(store: InMemoryStore, task: Generator[Any, Any, Observation], ops: list) -> Observation:
    effect: Any = ops
    while True:
        try:
            effect = answer(store, task, effect)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]


@dataclass
class Rebase:
    """A step test's store, with the index size of every call computed on it since the move."""

    store: InMemoryStore
    sizes: list[int]

    def move_past(self, writer_fix: Call) -> tuple[list[str], list[tuple], list]:
        """The outcome (:func:`outcome`) of a move that a writer's ``writer_fix`` committed past."""
        return outcome(memory(self.store), _move_past(self.store, writer_fix, self.sizes))


@pytest.fixture
def rebase(monkeypatch: pytest.MonkeyPatch) -> Iterator[Rebase]:
    """An empty store, moves recorded from three evictions on, full computes spied on."""
    sizes = _full_computes(monkeypatch)
    with recording(3):
        yield Rebase(InMemoryStore(), sizes)


def test_a_move_that_lost_its_commit_to_a_small_fix_commits_as_computed(rebase):
    seeded(rebase.store).close()
    entries, evicted, _ = rebase.move_past(("side-fix", "side"))
    assert entries == ["side-fix"]
    assert evicted == sorted((f"c{n}", "table-changed") for n in range(SEEDED))
    sizes = rebase.sizes
    assert sizes and all(size < SEEDED for size in sizes)  # only the writer's fix was checked again


def test_tombstones_written_meanwhile_number_the_moves_after_them(rebase):
    seeded(rebase.store).observe(ORIGIN, observed([("side-fix", "side")]), operation="op")
    tombs = rebase.move_past(("evict", "side"))[2]
    sizes = rebase.sizes
    assert sizes and all(size < SEEDED for size in sizes)  # rebased, not computed again
    assert tombs == [(1, "side-fix", "operator")] + [
        (2 + n, f"c{n}", "table-changed") for n in range(SEEDED)
    ]


def test_a_fix_stored_on_the_moved_table_meanwhile_makes_the_move_compute_again(rebase):
    seeded(rebase.store).close()
    entries, evicted, _ = rebase.move_past(("late", "catalog"))
    assert entries == []
    assert ("late", "table-changed") in evicted and len(evicted) == SEEDED + 1
    assert SEEDED + 1 in rebase.sizes  # the rebase was refused: the move computed again on all


# -- the state merge ---------------------------------------------------------------------------


def test_the_merge_keeps_each_sides_change_and_numbers_the_tombstones_after_theirs():
    base = OriginState(known={"catalog": "1"}, next_serial=7, next_tombstone=3)
    mine = OriginState(known={"catalog": "2"}, next_serial=7, next_tombstone=9)
    theirs = OriginState(known={"catalog": "1"}, next_serial=12, next_tombstone=5)

    merged = merge_state(base, mine, theirs)

    assert merged is not None
    assert (merged.known, merged.next_serial, merged.next_tombstone) == ({"catalog": "2"}, 12, 11)


def test_a_decision_field_moved_in_between_refuses_the_merge():
    base = OriginState(known={"catalog": "1"}, known_seq=0)
    mine = OriginState(known={"catalog": "2"}, known_seq=1)
    theirs = OriginState(known={"catalog": "1"}, known_seq=0, pending={"side": 0})

    assert merge_state(base, mine, theirs) is None


def test_serials_issued_on_both_sides_refuse_the_merge():
    base, mine, theirs = OriginState(), OriginState(next_serial=2), OriginState(next_serial=3)

    assert merge_state(base, mine, theirs) is None
