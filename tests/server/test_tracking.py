from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.protocol import Action
from invalidation_contracts.server import (
    ReadTracker,
    Rule,
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


def test_iterating_a_table_depends_on_its_key_set_and_no_row():
    tracker = ReadTracker()
    assert sorted(view(tracker)["t2"]) == KEYS[2:]
    [dep] = tracker.dependencies({"t2": "2.0.0"})
    assert dep.keys is None
    assert dep.membership is not None and dep.membership.keys == []
    assert tracker.key_sets == {"t2"}


def test_taking_a_tables_length_depends_on_its_key_set():
    tracker = ReadTracker()
    assert len(view(tracker)["t1"]) == 4
    assert tracker.key_sets == {"t1"}
    assert tracker.reads() == {"t1": frozenset()}


def test_listing_keys_then_reading_one_row_depends_on_the_key_set_and_that_row():
    tracker = ReadTracker()
    t1 = view(tracker)["t1"]
    first = next(iter(t1))
    t1[first]
    t1.get("absent")
    [dep] = tracker.dependencies({"t1": "1.0.0"})
    assert dep.membership is not None and dep.membership.keys == ["absent", first]


def test_reading_the_key_set_and_every_row_is_a_whole_table_read():
    tracker = ReadTracker()
    dict(view(tracker)["t1"].items())
    [dep] = tracker.dependencies({"t1": "1.0.0"})
    assert dep.keys is None and dep.membership is None
    assert tracker.key_sets == frozenset()
    assert tracker.reads() == {"t1": None}


def test_a_key_lookup_after_a_key_set_read_of_another_table_stays_a_row_read():
    tracker = ReadTracker()
    tables = view(tracker)
    len(tables["t1"])
    tables["t2"].get("k2")
    assert tracker.key_sets == {"t1"}
    assert tracker.reads() == {"t1": frozenset(), "t2": frozenset({"k2"})}


def test_a_rule_found_is_a_rule_dependency_and_a_rule_found_absent_an_absent_one():
    tracker = ReadTracker()
    tables = TrackedTables(SNAPS, RuleSet([Rule("t1", "t2", "r")]), tracker)
    assert tables.rules.declares("t1", "t2", "r")
    assert not tables.rules.declares("t2", "t1", "r")
    assert tracker.rules == [("t1", "t2", "r")]
    assert tracker.absent_rules == [("t2", "t1", "r")]


def test_a_lookup_for_any_relation_also_depends_on_relations_not_declared():
    tracker = ReadTracker()
    tables = TrackedTables(SNAPS, RuleSet([Rule("t1", "t2", "r")]), tracker)
    assert [rule.relation for rule in tables.rules.find("t1", "t2")] == ["r"]
    assert tracker.rules == [("t1", "t2", "r")]
    assert tracker.absent_rules == [("t1", "t2", None)]


def test_listing_the_rules_from_a_table_depends_on_rules_from_it_not_declared():
    tracker = ReadTracker()
    tables = TrackedTables(SNAPS, RuleSet([Rule("t1", "t2", "r")]), tracker)
    assert len(tables.rules.from_table("t1")) == 1
    assert tracker.absent_rules == [("t1", None, None)]


TABLE_NAMES = ["t1", "t2"]
RELATIONS = ["r", "s"]
TRIPLES = [(a, b, r) for a in TABLE_NAMES for b in TABLE_NAMES for r in RELATIONS]
lookups = st.lists(
    st.one_of(
        st.tuples(st.just("declares"), st.sampled_from(TRIPLES)),
        st.tuples(
            st.just("find"),
            st.tuples(
                st.sampled_from(TABLE_NAMES),
                st.sampled_from(TABLE_NAMES),
                st.sampled_from([None, *RELATIONS]),
            ),
        ),
        st.tuples(st.just("from_table"), st.sampled_from(TABLE_NAMES)),
    ),
    max_size=6,
)
rule_sets = st.sets(st.sampled_from(TRIPLES))


def answers(plan, triples):
    """What each lookup of ``plan`` returns under the rules ``triples``."""
    tables = TrackedTables(SNAPS, RuleSet(Rule(*t) for t in triples), ReadTracker())
    out = []
    for how, arg in plan:
        if how == "declares":
            out.append(tables.rules.declares(*arg))
        elif how == "find":
            out.append({rule.triple for rule in tables.rules.find(*arg)})
        else:
            out.append({rule.triple for rule in tables.rules.from_table(arg)})
    return out


@settings(max_examples=300, deadline=None)
@given(lookups, rule_sets, rule_sets)
def test_rule_dependencies_change_exactly_when_an_answer_would(plan, before, after):
    tracker = ReadTracker()
    tables = TrackedTables(SNAPS, RuleSet(Rule(*t) for t in before), tracker)
    for how, arg in plan:
        if how == "declares":
            tables.rules.declares(*arg)
        elif how == "find":
            tables.rules.find(*arg)
        else:
            tables.rules.from_table(arg)
    found, absent = set(tracker.rules), tracker.absent_rules

    def matches(triple, pattern):
        return all(want is None or want == got for want, got in zip(pattern, triple, strict=True))

    stale = not found <= after or any(
        matches(triple, pattern) for triple in after - found for pattern in absent
    )
    assert stale == (answers(plan, before) != answers(plan, after))


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
