"""No lesson lost (issue 38, item 2): fixes a failure teaches while a diff is outstanding are
held back, then learned once the diff is applied. Calls of several tasks interleave at every
store batch (each call's ``Steps`` driven by hand in an order hypothesis picks): the held lessons
are merged, never overwritten, so the memory ends as a sequential run does — the same fixes
stored, the same evictions."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.client import Evicted, FixMemory, Stored
from invalidation_contracts.client import calls as memory_calls
from invalidation_contracts.client.events import FetchChanges, Observation
from invalidation_contracts.client.shared.steps import Wait
from invalidation_contracts.client.stores import StoreError
from invalidation_contracts.client.values import Answer, Observed

ORIGIN = "https://lessons.example"
SEEDED = "seeded"


def failure(name: str, version: str) -> dict[str, Any]:
    suggestion = {
        "type": name,
        "action": "add_field",
        "parameters": {"note": name},
        "cache_hint": "cacheable",
        "scope": {"sku": name},
        "tables": [{"table": "t", "version": version, "keys": [name]}],
    }
    return {
        "type": "urn:x",
        "title": "t",
        "status": 422,
        "success": False,
        "recovery_feedback": {"suggestions": [suggestion]},
        "table_versions": {"t": version},
        "contract_seq": 0 if version == "1.0.0" else 1,
        "contract_epoch": "e",
    }


FEED = {
    "contract_epoch": "e",
    "since": 0,
    "last_seq": 1,
    "rows": [
        {
            "seq": 1,
            "table": "t",
            "key": SEEDED,
            "op": "changed",
            "old_version": "1.0.0",
            "new_version": "1.1.0",
        }
    ],
    "tables": [{"seq": 1, "table": "t", "old_version": "1.0.0", "new_version": "1.1.0"}],
}


def seeded() -> FixMemory:
    """A fix on row ``seeded``, then a success whose stamp moved: a diff is outstanding."""
    memory = FixMemory("row")
    memory.observe(ORIGIN, Observed({"sku": SEEDED}, 422, failure(SEEDED, "1.0.0")), operation="op")
    moved = {"success": True, "table_versions": {"t": "1.1.0"}, "contract_seq": 1}
    obs = memory.observe(ORIGIN, Observed(None, 200, {**moved, "contract_epoch": "e"}))
    assert [n for n in obs.needs if isinstance(n, FetchChanges)]
    return memory


def tasks(memory: FixMemory, taught: list[str]) -> list[Generator[Any, Any, Observation]]:
    """One task per fix taught (a 422 while the diff is outstanding) and one answering the feed."""
    core = memory._core
    out = [
        memory_calls.observe(
            core, ORIGIN, Observed({"sku": name}, 422, failure(name, "1.1.0")), operation="op"
        )
        for name in taught
    ]
    need = FetchChanges(ORIGIN, 0, "e")
    out.append(memory_calls.answer(core, need, Answer(200, FEED)))
    return out


def interleave(memory: FixMemory, steps: list[Generator[Any, Any, Any]], order: list[int]) -> list:
    """Drive every task one store batch at a time, in ``order`` (then round robin): the
    observations, by task."""
    store = memory.store
    pending = {i: (step, next(step)) for i, step in enumerate(steps)}
    results: list[Any] = [None] * len(steps)
    picks = iter(order)
    turn = 0
    while pending:
        pick = next(picks, None)
        if pick is None:  # the order is spent: round robin, so a task waiting on another's turn
            pick, turn = turn, turn + 1  # lets the holder run (never spins on one task)
        i = sorted(pending)[pick % len(pending)]
        step, effect = pending.pop(i)
        try:
            if isinstance(effect, Wait):
                effect = step.send([])
            else:
                try:
                    result = store.batch(effect)
                except StoreError as exc:
                    effect = step.throw(exc)
                else:
                    effect = step.send(result)
        except StopIteration as done:
            results[i] = done.value
            continue
        pending[i] = (step, effect)
    return results


def outcome(memory: FixMemory, observations: list[Observation]) -> tuple[set, list]:
    evicted = [
        (memory_type(e), e.reason.value)
        for obs in observations
        for e in obs.events
        if isinstance(e, Evicted)
    ]
    return {e.key.type for e in memory.entries(ORIGIN)}, sorted(evicted)


def memory_type(event: Evicted) -> str:
    return event.key.type


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=4, unique=True),
    st.lists(st.integers(min_value=0, max_value=7), max_size=40),
)
def test_interleaved_observes_and_feed_answers_end_as_a_sequential_run(taught, order):
    sequential = seeded()
    with sequential:
        runs = [
            sequential.observe(
                ORIGIN, Observed({"sku": n}, 422, failure(n, "1.1.0")), operation="op"
            )
            for n in taught
        ]
        runs.append(sequential.answer(FetchChanges(ORIGIN, 0, "e"), Answer(200, FEED)))
        expected = outcome(sequential, runs)

    concurrent = seeded()
    with concurrent:
        observations = interleave(concurrent, tasks(concurrent, taught), order)
        got = outcome(concurrent, observations)
        stored = {e.key.type for obs in observations for e in obs.events if isinstance(e, Stored)}

    assert expected == (set(taught), [(SEEDED, "row-changed")])
    assert got == expected and stored == set(taught)
