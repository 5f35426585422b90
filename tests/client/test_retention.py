"""Bounded history: an identical fix taught again is a restamp, and tombstones are pruned by
count and by age (``client.retention``; reliability audit 2, N7)."""

from __future__ import annotations

from tests.client.shared_model import ORIGIN, contract

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.client.limits import Limits
from invalidation_contracts.client.values import Observed

DAY = 86_400.0


def failure(value: str, seq: int = 0) -> dict:
    fix = {
        "type": "ADD_CODE",
        "parameters": {"code": value},
        "action": "add_field",
        "cache_hint": "cacheable",
        "scope": {"item": "s0"},
        "tables": [{"table": "t0", "version": f"1.0.{seq}", "keys": ["k0"]}],
    }
    return {
        "type": "urn:x:policy",
        "title": "t",
        "status": 422,
        "success": False,
        "recovery_feedback": {"suggestions": [fix]},
        **contract(seq),
    }


class Clock:
    def __init__(self) -> None:
        self.now = 1_000 * DAY

    def __call__(self) -> float:
        return self.now


def test_ten_thousand_identical_422s_leave_one_entry_and_no_tombstone(tmp_path):
    with FixMemory("row", store=tmp_path / "m.db") as memory:
        for _ in range(10_000):
            memory.observe(ORIGIN, Observed({"item": "s0"}, 422, failure("A")))

        assert [e.id for e in memory.entries(ORIGIN)] == ["e1"]
        assert memory.tombstones(ORIGIN) == []


def test_a_different_fix_for_the_same_key_still_replaces_it():
    with FixMemory("naive") as memory:
        memory.observe(ORIGIN, Observed({"item": "s0"}, 422, failure("A")))
        memory.observe(ORIGIN, Observed({"item": "s0"}, 422, failure("B")))

        assert [e.suggestion.parameters for e in memory.entries(ORIGIN)] == [{"code": "B"}]
        assert [t.reason for t in memory.tombstones(ORIGIN)] == [EvictionReason.SUPERSEDED]


def test_tombstones_past_the_count_bound_drop_the_oldest(tmp_path):
    limits = Limits(max_tombstones_per_origin=50)
    with FixMemory("naive", store=tmp_path / "m.db", limits=limits) as memory:
        for i in range(1_000):  # a server alternating two fixes for one key
            memory.observe(ORIGIN, Observed({"item": "s0"}, 422, failure("AB"[i % 2])))

        tombstones = memory.tombstones(ORIGIN)
        assert len(tombstones) == 50
        assert [t.sequence for t in tombstones] == list(range(950, 1_000))


def test_tombstones_older_than_the_age_bound_are_dropped_by_a_later_write(tmp_path):
    clock = Clock()
    limits = Limits(tombstone_max_age_s=int(30 * DAY))
    with FixMemory("naive", store=tmp_path / "m.db", clock=clock, limits=limits) as memory:
        for value in "ABA":
            memory.observe(ORIGIN, Observed({"item": "s0"}, 422, failure(value)))
        clock.now += 10 * DAY
        memory.observe(ORIGIN, Observed({"item": "s0"}, 422, failure("B")))
        assert len(memory.tombstones(ORIGIN)) == 3

        clock.now += 25 * DAY  # the first day's two are 35 days old, the last one 25
        memory.observe(ORIGIN, Observed({"item": "s0"}, 422, failure("A")))

        assert [t.sequence for t in memory.tombstones(ORIGIN)] == [3, 4]


def test_the_bounds_hold_for_a_memory_reopened_from_its_file(tmp_path):
    limits = Limits(max_tombstones_per_origin=10)
    for _ in range(3):
        with FixMemory("naive", store=tmp_path / "m.db", limits=limits) as memory:
            for i in range(30):
                memory.observe(ORIGIN, Observed({"item": "s0"}, 422, failure("AB"[i % 2])))

    with FixMemory("naive", store=tmp_path / "m.db", limits=limits) as memory:
        assert len(memory.tombstones(ORIGIN)) == 10
