"""The optimizations made for the benchmarks change speed only: each fast path equals the slow
one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.client.entries import MemoryEntry, MemoryKey, Provenance
from invalidation_contracts.client.shared.index import OriginIndex
from invalidation_contracts.protocol.models import Action, Suggestion
from invalidation_contracts.server.tables import Snapshot, diff

KEYS = st.sampled_from([f"k{i}" for i in range(8)])
VALUES = st.one_of(st.integers(-3, 3), st.booleans(), st.none(), st.sampled_from(["a", "b", "0"]))
ROWS = st.dictionaries(
    KEYS, st.dictionaries(st.sampled_from(["x", "y"]), VALUES, max_size=2), max_size=8
)
SCOPES = st.dictionaries(st.sampled_from(["plan", "token", "n"]), VALUES, max_size=2)


@settings(max_examples=150, deadline=None)
@given(ROWS, ROWS)
def test_whole_table_diff_equals_the_diff_over_every_key(old: dict, new: dict) -> None:
    before, after = Snapshot.build("t", "1.0.0", old), Snapshot.build("t", "1.0.0", new)
    assert diff(before, after) == diff(before, after, keys=set(old) | set(new))


@settings(max_examples=150, deadline=None)
@given(ROWS, ROWS, st.data())
def test_a_patched_snapshot_equals_one_built_from_the_patched_rows(
    old: dict, upsert: dict, data
) -> None:
    deletable = sorted(set(old) - set(upsert))
    delete = data.draw(
        st.lists(st.sampled_from(deletable), unique=True) if deletable else st.just([])
    )
    patched = Snapshot.build("t", "1.0.0", old).with_changes("1.1.0", upsert, delete)
    expected = {k: v for k, v in old.items() if k not in delete} | upsert
    rebuilt = Snapshot.build("t", "1.1.0", expected)
    assert patched.plain_rows() == rebuilt.plain_rows()
    assert dict(patched.etags) == dict(rebuilt.etags)


def _entry(serial: int, scope: dict) -> MemoryEntry:
    suggestion = Suggestion(
        type=f"T{serial % 2}", parameters={}, action=Action.ADD_FIELD, scope=scope or None
    )
    return MemoryEntry(
        id=f"e{serial}",
        serial=serial,
        key=MemoryKey.of("https://o.test", suggestion.type, scope),
        suggestion=suggestion,
        dependencies=(),
        rules=(),
        rules_version=None,
        contract_seq=None,
        contract_epoch=None,
        validated_seq=None,
        validated_at=0.0,
        provenance=Provenance(None, None, 0.0),
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(SCOPES, max_size=12), SCOPES, st.lists(st.integers(0, 11), max_size=4))
def test_index_matching_selects_what_a_scan_of_matches_selects(
    scopes: list, draft: dict, removed: list
) -> None:
    index = OriginIndex(_entry(i + 1, scope) for i, scope in enumerate(scopes))
    for i in removed:
        if f"e{i + 1}" in index:
            index.remove(f"e{i + 1}")
    assert [e.id for e in index.matching(draft)] == [e.id for e in index if e.matches(draft)]


def test_index_matching_falls_back_to_a_scan_for_a_value_that_is_not_json() -> None:
    index = OriginIndex([_entry(1, {"n": 1}), _entry(2, {})])
    assert [e.id for e in index.matching({"n": float("nan")})] == ["e2"]
