"""One memory surface, sync and async (issue 28, item 2): ``FixMemory`` and ``AsyncFixMemory``
expose the same calls with the same signatures, each call that may touch the store a coroutine on
the async one, and the async calls give what the sync ones give, on a real SQLite store."""

from __future__ import annotations

import asyncio
import inspect

from tests.client.contention_model import ORIGIN, REQUEST, contract, failure, fix

from invalidation_contracts.client import Answer, AsyncFixMemory, FixMemory, Observed, Position
from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.client.events import FetchChanges

#: The calls that touch no store, plain on both memories.
NO_IO = {"reopened", "announced", "over"}


def _public(memory: object) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(getattr(memory, name))
        for name in dir(memory)
        if not name.startswith("_") and callable(getattr(memory, name))
    }


def test_the_sync_and_async_memories_expose_the_same_calls_with_the_same_signatures():
    sync, twin = FixMemory(), AsyncFixMemory()
    calls, async_calls = _public(sync), _public(twin)
    assert calls.keys() == async_calls.keys()
    assert {"observe", "answer", "lookup", "position", "entries", "close"} <= calls.keys()
    for name, signature in calls.items():
        assert list(signature.parameters.values()) == list(async_calls[name].parameters.values()), (
            name
        )


def test_every_call_that_may_touch_the_store_is_a_coroutine_on_the_async_memory():
    sync, twin = FixMemory(), AsyncFixMemory()
    for name in _public(twin).keys() - NO_IO:
        assert inspect.iscoroutinefunction(getattr(twin, name)), name
        assert not inspect.iscoroutinefunction(getattr(sync, name)), name


def test_each_call_keeps_its_documentation_on_both_memories():
    for name in ("observe", "answer", "lookup", "position", "tombstones"):
        assert getattr(FixMemory(), name).__doc__ == getattr(AsyncFixMemory(), name).__doc__
        assert getattr(FixMemory(), name).__doc__


def test_an_async_memory_over_a_sync_one_shares_its_store_and_replicas(tmp_path):
    memory = FixMemory("row", store=tmp_path / "m.db")
    _learn(memory, 2)

    async def run() -> int:
        return len(await AsyncFixMemory.over(memory).entries(ORIGIN))

    assert asyncio.run(run()) == 2
    assert AsyncFixMemory.over(memory).store is memory.store
    memory.close()


def _learn(memory: FixMemory, count: int) -> None:
    fixes = [fix(f"F{i}", "t0", "1.0.0") for i in range(count)]
    memory.observe(ORIGIN, Observed(REQUEST, 422, failure(fixes)))


def test_the_async_reads_and_evict_give_what_the_sync_ones_give(tmp_path):
    sync = FixMemory("table", store=tmp_path / "sync.db")
    twin = AsyncFixMemory("table", store=tmp_path / "async.db")
    _learn(sync, 5)
    _learn(FixMemory.over(twin), 5)
    moved_body = {"success": True, **contract("2.0.0")}

    def ids(entries):
        return [e.suggestion.type for e in entries]

    async def run() -> dict:
        first = (await twin.entries(ORIGIN))[0].id
        evicted = await twin.evict(ORIGIN, entry_ids=[first], detail="by hand")
        moved = await twin.observe(ORIGIN, Observed(None, 200, moved_body))
        return {
            "evicted": [e.kind for e in evicted.events],
            "moved": sorted(e.kind for e in moved.events),
            "entries": ids(await twin.entries(ORIGIN)),
            "tombstones": [t.reason for t in await twin.tombstones(ORIGIN)],
            "stats": (await twin.stats(ORIGIN)).evictions,
            "origins": await twin.origins(),
            "position": await twin.position(ORIGIN),
            "state": (await twin.state(ORIGIN)).epoch,
        }

    got = asyncio.run(run())
    first = sync.entries(ORIGIN)[0].id
    expected = {
        "evicted": [e.kind for e in sync.evict(ORIGIN, entry_ids=[first], detail="by hand").events],
        "moved": sorted(
            e.kind for e in sync.observe(ORIGIN, Observed(None, 200, moved_body)).events
        ),
        "entries": ids(sync.entries(ORIGIN)),
        "tombstones": [t.reason for t in sync.tombstones(ORIGIN)],
        "stats": sync.stats(ORIGIN).evictions,
        "origins": sync.origins(),
        "position": sync.position(ORIGIN),
        "state": sync.state(ORIGIN).epoch,
    }
    assert got == expected
    assert isinstance(got["position"], Position) and got["position"].known
    assert got["tombstones"][0] == EvictionReason.OPERATOR and len(got["tombstones"]) == 5
    sync.close()
    asyncio.run(twin.close())


def test_the_async_answer_resyncs_and_falls_back_as_the_sync_one(tmp_path):
    need = FetchChanges(ORIGIN, 0, "e")

    async def run(memory: AsyncFixMemory) -> list[str]:
        _learn(FixMemory.over(memory), 3)
        failed = await memory.answer(need, Answer.unusable())
        resync = await memory.answer(need, Answer.resync())
        await memory.close()
        return [e.kind for e in (*failed.events, *resync.events)]

    async_kinds = asyncio.run(run(AsyncFixMemory("row", store=tmp_path / "a.db")))
    sync = FixMemory("row", store=tmp_path / "s.db")
    _learn(sync, 3)
    sync_kinds = [
        e.kind
        for e in (
            *sync.answer(need, Answer.unusable()).events,
            *sync.answer(need, Answer.resync()).events,
        )
    ]
    sync.close()
    assert async_kinds == sync_kinds
    assert "evicted" in async_kinds


def test_the_need_feed_is_answer_alone():
    """Issue 28: ``answer(need, Answer...)`` is the one need feed; the per-case feeders are gone."""
    surface = _public(FixMemory())
    assert not {"apply_changes", "apply_rules", "resync_required", "need_failed"} & surface.keys()
