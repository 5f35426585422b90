"""Confirmed before served: a memory reopened by a new process serves nothing of an origin until
one conditional read says what moved since its stored position (SPEC §7, ``client.confirmation``).
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.client.shared_model import EPOCH, KEYS, ORIGIN, contract, feed, fix

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.events import FetchChanges, FetchFailed
from invalidation_contracts.client.values import Answer, Observed


def failure(i: int, seq: int = 0) -> dict:
    return {
        "type": "urn:x:policy",
        "title": "t",
        "status": 422,
        "success": False,
        "recovery_feedback": {"suggestions": [fix(i, seq)]},
        **contract(seq),
    }


def learn(path: Path, fixes: range, seq: int = 0) -> None:
    """A first process learns ``fixes`` at ``seq`` and exits."""
    with FixMemory("row", store=path) as memory:
        for i in fixes:
            memory.observe(ORIGIN, Observed(None, 422, failure(i, seq)))


def served(memory: FixMemory, scopes: int = 2) -> list[str]:
    return sorted(
        e.id for s in range(scopes) for e in memory.lookup(ORIGIN, {"item": f"s{s}"}).entries
    )


def test_a_new_process_serves_nothing_before_it_confirms_the_origin(tmp_path):
    learn(tmp_path / "m.db", range(2))

    with FixMemory("row", store=tmp_path / "m.db") as memory:
        found = memory.lookup(ORIGIN, {"item": "s0"})

    assert found.entries == ()
    assert found.needs == (FetchChanges(ORIGIN, 0, EPOCH),)


def test_the_confirmation_read_evicts_what_moved_while_away_and_serves_the_rest(tmp_path):
    learn(tmp_path / "m.db", range(2))  # e1 on row k0 (scope s0), e2 on row k1 (scope s1)

    with FixMemory("row", store=tmp_path / "m.db") as memory:
        (need,) = memory.needs(ORIGIN)
        memory.answer(need, Answer(200, feed(["k0"], 0, 1)))

        assert served(memory) == ["e2"]
        assert [t.entry.id for t in memory.tombstones(ORIGIN)] == ["e1"]


def test_a_read_that_fails_keeps_every_entry_withheld(tmp_path):
    learn(tmp_path / "m.db", range(2))

    with FixMemory("row", store=tmp_path / "m.db") as memory:
        (need,) = memory.needs(ORIGIN)
        obs = memory.fetch_failed(need, "ConnectError")
        again = memory.needs(ORIGIN)

        assert served(memory) == []
        assert obs.of(FetchFailed)[0].withheld == ("e1", "e2")
        assert again == [need]


def test_a_response_read_at_the_position_confirms_the_origin(tmp_path):
    learn(tmp_path / "m.db", range(2))

    with FixMemory("row", store=tmp_path / "m.db") as memory:
        memory.observe(ORIGIN, Observed(None, 200, {"success": True, **contract(0)}))

        assert served(memory) == ["e1", "e2"]


def test_a_410_confirms_by_evicting_everything(tmp_path):
    learn(tmp_path / "m.db", range(2))

    with FixMemory("row", store=tmp_path / "m.db") as memory:
        (need,) = memory.needs(ORIGIN)
        memory.answer(need, Answer(410, {"status": 410, "title": "resync required"}))

        assert served(memory) == [] and memory.needs(ORIGIN) == []


def test_a_reopened_connection_asks_for_the_read_again(tmp_path):
    with FixMemory("row", store=tmp_path / "m.db") as memory:
        memory.observe(ORIGIN, Observed(None, 422, failure(0)))
        assert served(memory) == ["e1"]

        memory.reopened(ORIGIN)

        assert served(memory) == []
        assert memory.needs(ORIGIN) == [FetchChanges(ORIGIN, 0, EPOCH)]


def test_lazy_detection_claims_nothing_and_gates_nothing(tmp_path):
    learn(tmp_path / "m.db", range(2))

    with FixMemory("row", detection="lazy", store=tmp_path / "m.db") as memory:
        assert served(memory) == ["e1", "e2"]
        assert memory.needs(ORIGIN) == []


def test_a_memory_that_learned_in_this_process_needs_no_read(tmp_path):
    with FixMemory("row", store=tmp_path / "m.db") as memory:
        memory.observe(ORIGIN, Observed(None, 422, failure(0)))

        assert served(memory) == ["e1"] and memory.needs(ORIGIN) == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    learned=st.integers(min_value=1, max_value=len(KEYS)),
    away=st.lists(st.sampled_from([*KEYS, None]), min_size=0, max_size=6),
)
def test_after_any_drift_while_away_exactly_the_unmoved_fixes_are_served(
    tmp_path_factory, learned, away
):
    """Oracle: a fix is current iff no change while away touched its row."""
    path = tmp_path_factory.mktemp("m") / "m.db"
    learn(path, range(learned))
    scopes = min(learned, 2)

    with FixMemory("row", store=path) as memory:
        before = served(memory, scopes)
        for need in memory.needs(ORIGIN):
            memory.answer(need, Answer(200, feed(away, 0, len(away))))
        after = served(memory, scopes)

    moved = {key for key in away if key is not None}
    expected = sorted(f"e{i + 1}" for i in range(learned) if KEYS[i % len(KEYS)] not in moved)
    assert before == []
    assert after == expected
