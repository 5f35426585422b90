"""No stale fix after a drift is announced (issue 38 item 3): from the moment an adapter hears of
a change (a notification, a watch event) until the memory has read past it, a lookup serves
nothing the change may have made stale (``client.confirmation``)."""

from __future__ import annotations

from tests.client.shared_model import EPOCH, ORIGIN, contract, feed
from tests.client.test_confirmation import failure, served

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.events import FetchChanges
from invalidation_contracts.client.values import Answer, Observed

STEPS = ["k0"]  # the announced change: row k0 (e1's row) moves at seq 1; e2's row k1 does not


def learned() -> FixMemory:
    memory = FixMemory("row")
    for i in range(2):
        memory.observe(ORIGIN, Observed(None, 422, failure(i)))
    assert served(memory) == ["e1", "e2"]
    return memory


def test_a_lookup_at_once_after_an_announced_position_serves_nothing_of_the_origin():
    memory = learned()

    memory.announced(ORIGIN, 1, EPOCH)

    found = memory.lookup(ORIGIN, {"item": "s0"})
    assert found.entries == ()
    assert found.needs == (FetchChanges(ORIGIN, 0, EPOCH),)


def test_reading_the_announced_position_keeps_the_moved_table_withheld_until_the_diff():
    memory = learned()
    memory.announced(ORIGIN, 1, EPOCH)

    obs = memory.observe(ORIGIN, Observed(None, 200, {"success": True, **contract(1)}))
    assert served(memory) == []  # the table moved: withheld until its rows are known

    for need in obs.needs:
        memory.answer(need, Answer(200, feed(STEPS, 0, 1)))
    assert served(memory) == ["e2"]
    assert [t.entry.id for t in memory.tombstones(ORIGIN)] == ["e1"]


def test_a_read_short_of_the_announced_position_keeps_the_origin_withheld():
    memory = learned()
    memory.announced(ORIGIN, 2, EPOCH)

    memory.observe(ORIGIN, Observed(None, 200, {"success": True, **contract(0)}))

    assert served(memory) == []


def test_an_announcement_without_a_position_withholds_until_a_read_confirms_the_origin():
    memory = learned()

    memory.announced(ORIGIN)
    assert served(memory) == []

    (need,) = memory.needs(ORIGIN)
    memory.answer(need, Answer(200, feed(STEPS, 0, 1)))
    assert served(memory) == ["e2"]


def test_lazy_detection_withholds_nothing_on_an_announcement():
    memory = FixMemory("row", detection="lazy")
    memory.observe(ORIGIN, Observed(None, 422, failure(0)))

    memory.announced(ORIGIN, 1, EPOCH)

    assert served(memory) == ["e1"]
