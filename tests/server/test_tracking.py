from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.protocol import Action
from invalidation_contracts.server import (
    ReadTracker,
    RuleSet,
    Snapshot,
    TrackedTables,
    Violation,
    evaluate,
    policy,
)

KEYS = [f"k{i}" for i in range(6)]
SNAPS = {
    "t1": Snapshot.build("t1", "1.0.0", {k: {"v": i} for i, k in enumerate(KEYS[:4])}),
    "t2": Snapshot.build("t2", "2.0.0", {k: {"v": i} for i, k in enumerate(KEYS[2:])}),
}


def view(tracker):
    return TrackedTables(SNAPS, RuleSet(), tracker)


def test_get_records_the_key_even_when_the_row_is_missing():
    tracker = ReadTracker()
    assert view(tracker)["t1"].get("absent") is None
    assert tracker.reads() == {"t1": frozenset({"absent"})}


def test_iterating_a_table_depends_on_the_whole_table():
    tracker = ReadTracker()
    list(view(tracker)["t2"])
    assert tracker.dependencies({"t2": "2.0.0"})[0].keys is None


def test_rule_lookups_are_recorded_only_when_found():
    from invalidation_contracts.server import Rule

    tracker = ReadTracker()
    tables = TrackedTables(SNAPS, RuleSet([Rule("t1", "t2", "r")]), tracker)
    assert tables.rules.declares("t1", "t2", "r")
    assert not tables.rules.declares("t2", "t1", "r")
    assert tracker.rules == [("t1", "t2", "r")]


reads = st.lists(
    st.tuples(
        st.sampled_from(["t1", "t2"]), st.sampled_from(KEYS), st.sampled_from(["get", "in", "item"])
    ),
    max_size=10,
)


@settings(max_examples=200, deadline=None)
@given(reads)
def test_dependency_vector_equals_the_rows_the_policy_read(plan):
    @policy("p")
    def check(request, tables):
        for table, key, how in plan:
            if how == "get":
                tables[table].get(key)
            elif how == "in":
                _ = key in tables[table]
            elif key in SNAPS[table].rows:
                _ = tables[table][key]
        return Violation("FIX", "m", {"f": 1}, Action.ADD_FIELD)

    (finding,) = evaluate([check], {}, SNAPS, RuleSet())
    expected = {}
    for table, key, how in plan:
        if how != "item" or key in SNAPS[table].rows:
            expected.setdefault(table, set()).add(key)
    assert {t: set(k) for t, k in finding.reads.items()} == expected
    assert finding.cacheable == bool(expected)


def test_each_policy_gets_its_own_dependency_vector():
    @policy("reads_t1")
    def a(request, tables):
        tables["t1"].get("k0")
        return Violation("A", "m", {"x": 1}, Action.ADD_FIELD)

    @policy("reads_nothing")
    def b(request, tables):
        return Violation("B", "m", {"y": 1}, Action.REWRITE_VALUE)

    first, second = evaluate([a, b], {}, SNAPS, RuleSet())
    assert first.reads == {"t1": frozenset({"k0"})} and first.cacheable
    assert second.reads == {} and not second.cacheable
