"""The async twin of the whole memory (issue 22, item 9): every public call of ``FixMemory`` has
an ``a``-prefixed twin, and the twins give what the sync calls give, on a real SQLite store."""

from __future__ import annotations

import asyncio
import inspect

from tests.client.contention_model import ORIGIN, REQUEST, contract, failure, fix

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.client.events import FetchChanges

#: Sync calls with no async twin on purpose: ``reopened`` only marks the origin (no store I/O).
NO_TWIN = {"reopened"}


def test_every_public_call_has_an_async_twin():
    calls = {
        name
        for name, member in inspect.getmembers(FixMemory, inspect.isfunction)
        if not name.startswith("_") and not inspect.iscoroutinefunction(member)
    }
    missing = sorted(
        name
        for name in calls - NO_TWIN
        if not inspect.iscoroutinefunction(getattr(FixMemory, "a" + name, None))
    )
    assert "entries" in calls and "evict" in calls
    assert missing == []


def _learn(memory: FixMemory, count: int) -> None:
    fixes = [fix(f"F{i}", "t0", "1.0.0") for i in range(count)]
    memory.observe(ORIGIN, REQUEST, 422, failure(fixes))


def test_the_async_reads_and_evict_give_what_the_sync_ones_give(tmp_path):
    sync = FixMemory("table", store=tmp_path / "sync.db")
    twin = FixMemory("table", store=tmp_path / "async.db")
    for memory in (sync, twin):
        _learn(memory, 5)

    def ids(entries):
        return [e.suggestion.type for e in entries]

    async def run() -> dict:
        first = (await twin.aentries(ORIGIN))[0].id
        evicted = await twin.aevict(ORIGIN, entry_ids=[first], detail="by hand")
        moved = await twin.aobserve(ORIGIN, None, 200, {"success": True, **contract("2.0.0")})
        return {
            "evicted": [e.kind for e in evicted.events],
            "moved": sorted(e.kind for e in moved.events),
            "entries": ids(await twin.aentries(ORIGIN)),
            "tombstones": [t.reason for t in await twin.atombstones(ORIGIN)],
            "stats": (await twin.astats(ORIGIN)).evictions,
            "origins": await twin.aorigins(),
            "since": await twin.acontract_since(ORIGIN),
            "state": (await twin.astate(ORIGIN)).epoch,
        }

    got = asyncio.run(run())
    first = sync.entries(ORIGIN)[0].id
    expected = {
        "evicted": [e.kind for e in sync.evict(ORIGIN, entry_ids=[first], detail="by hand").events],
        "moved": sorted(
            e.kind
            for e in sync.observe(ORIGIN, None, 200, {"success": True, **contract("2.0.0")}).events
        ),
        "entries": ids(sync.entries(ORIGIN)),
        "tombstones": [t.reason for t in sync.tombstones(ORIGIN)],
        "stats": sync.stats(ORIGIN).evictions,
        "origins": sync.origins(),
        "since": sync.contract_since(ORIGIN),
        "state": sync.state(ORIGIN).epoch,
    }
    assert got == expected
    assert got["tombstones"][0] == EvictionReason.OPERATOR and len(got["tombstones"]) == 5
    sync.close()
    twin.close()


def test_the_async_answer_feeders_resync_and_fall_back_as_the_sync_ones(tmp_path):
    async def run(memory: FixMemory) -> list[str]:
        _learn(memory, 3)
        need = FetchChanges(ORIGIN, 0, "e")
        failed = await memory.aneed_failed(need)
        resync = await memory.aresync_required(ORIGIN)
        return [e.kind for e in (*failed.events, *resync.events)]

    async_kinds = asyncio.run(run(FixMemory("row", store=tmp_path / "a.db")))
    sync = FixMemory("row", store=tmp_path / "s.db")
    _learn(sync, 3)
    sync_kinds = [
        e.kind
        for e in (
            *sync.need_failed(FetchChanges(ORIGIN, 0, "e")).events,
            *sync.resync_required(ORIGIN).events,
        )
    ]
    assert async_kinds == sync_kinds
    assert "evicted" in async_kinds
