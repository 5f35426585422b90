"""The entry index and a call's overlay on it, against brute-force scans of the entries.

Random stores, restamps and removals; after each, every query of ``OriginIndex`` must equal a
filter over all live entries in serial order, and an ``IndexOverlay`` over a committed index must
answer exactly as the index would after the same changes — before and after it is folded in.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.client.entries import (
    Dependency,
    MemoryEntry,
    MemoryKey,
    Provenance,
)
from invalidation_contracts.client.shared.index import OriginIndex
from invalidation_contracts.client.shared.overlay import IndexOverlay
from invalidation_contracts.protocol.models import Action, Suggestion

TABLES = ("t0", "t1")
KEYS = ("k0", "k1", "k2")
RULES = (("t0", "t1", "r"), ("t1", "t0", "s"))
OPERATIONS = ("", "POST /a")


def entry(serial: int, spec: dict) -> MemoryEntry:
    deps = tuple(
        Dependency(table, "1", None if keys is None else tuple(sorted(keys)))
        for table, keys in sorted(spec["reads"].items())
    )
    scope = {"plan": spec["plan"]} if spec["plan"] is not None else {}
    suggestion = Suggestion(
        type=spec["type"], parameters={"v": serial}, action=Action.ADD_FIELD, origin_wide=True
    )
    return MemoryEntry(
        id=f"e{serial}",
        serial=serial,
        key=MemoryKey.of("o", spec["type"], scope, spec["operation"]),
        suggestion=suggestion,
        dependencies=deps,
        rules=tuple(sorted(spec["rules"])),
        rules_version=None,
        contract_seq=0,
        contract_epoch=None,
        validated_seq=0,
        validated_at=0.0,
        provenance=Provenance(None, None, 0.0),
        derived_from=tuple(spec["parents"]),
    )


specs = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["A", "B"]),
        "plan": st.one_of(st.none(), st.sampled_from(["p", "q"])),
        "operation": st.sampled_from(OPERATIONS),
        "reads": st.dictionaries(
            st.sampled_from(TABLES),
            st.one_of(st.none(), st.frozensets(st.sampled_from(KEYS), min_size=1)),
            max_size=2,
        ),
        "rules": st.frozensets(st.sampled_from(RULES)),
        "parents": st.lists(st.sampled_from([f"e{n}" for n in range(1, 8)]), max_size=2),
    }
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), specs),
        st.tuples(st.just("remove"), st.integers(0, 20)),
        st.tuples(st.just("restamp"), st.integers(0, 20)),
    ),
    max_size=14,
)


def brute(entries: list[MemoryEntry]) -> dict:
    live = sorted(entries, key=lambda e: e.serial)
    out: dict = {}
    for table in TABLES:
        out[("table", table)] = [e.id for e in live if table in e.tables]
        out[("whole", table)] = [
            e.id for e in live if any(d.table == table and d.keys is None for d in e.dependencies)
        ]
        for key in KEYS:
            out[("row", table, key)] = [
                e.id
                for e in live
                if any(d.table == table and key in (d.keys or ()) for d in e.dependencies)
            ]
    for rule in RULES:
        out[("rule", rule)] = [e.id for e in live if rule in e.rules]
    out["rule_dependent"] = [e.id for e in live if e.rules]
    for kind in ("A", "B"):
        out[("type", kind)] = [e.id for e in live if e.type == kind]
    for parent in (e.id for e in live):  # the consumers of a live entry (what cascades use)
        out[("consumers", parent)] = [e.id for e in live if parent in e.derived_from]
    for operation in OPERATIONS:
        for draft in ({}, {"plan": "p"}, {"plan": "q", "x": 1}):
            key = ("matching", operation, tuple(sorted(draft.items())))
            out[key] = [e.id for e in live if e.operation == operation and e.matches(draft)]
    return out


def queried(index: OriginIndex | IndexOverlay) -> dict:
    out: dict = {}
    for table in TABLES:
        out[("table", table)] = [e.id for e in index.on_table(table)]
        out[("whole", table)] = [e.id for e in index.whole_table(table)]
        for key in KEYS:
            out[("row", table, key)] = [e.id for e in index.on_row(table, key)]
    for rule in RULES:
        out[("rule", rule)] = [e.id for e in index.with_rule(rule)]
    out["rule_dependent"] = [e.id for e in index.rule_dependent()]
    for kind in ("A", "B"):
        out[("type", kind)] = [e.id for e in index.of_type(kind)]
    for parent in sorted((e for e in index), key=lambda e: e.serial):
        out[("consumers", parent.id)] = [e.id for e in index.consumers_of(parent.id)]
    for operation in OPERATIONS:
        for draft in ({}, {"plan": "p"}, {"plan": "q", "x": 1}):
            key = ("matching", operation, tuple(sorted(draft.items())))
            out[key] = [e.id for e in index.matching(draft, operation)]
    return out


def apply(index: OriginIndex | IndexOverlay, live: dict, step: tuple, serial: list[int]) -> None:
    kind, arg = step
    if kind == "add":
        serial[0] += 1
        made = entry(serial[0], arg)
        index.add(made)
        live[made.id] = made
    elif live:
        target = sorted(live)[arg % len(live)]
        if kind == "remove":
            index.remove(target)
            del live[target]
        else:
            stamped = live[target].restamped(versions={t: "2" for t in TABLES})
            index.replace(stamped)
            live[target] = stamped


@settings(max_examples=200, deadline=None)
@given(steps=steps)
def test_every_index_query_equals_a_scan_of_the_live_entries(steps):
    index, live, serial = OriginIndex(), {}, [0]
    for step in steps:
        apply(index, live, step, serial)
        assert queried(index) == brute(list(live.values()))
        assert sorted(e.id for e in index) == sorted(live)


@settings(max_examples=200, deadline=None)
@given(before=steps, during=steps)
def test_an_overlay_answers_as_the_index_would_and_folds_into_it_exactly(before, during):
    base, live, serial = OriginIndex(), {}, [0]
    for step in before:
        apply(base, live, step, serial)
    overlay = IndexOverlay(base)
    committed = dict(live)
    for step in during:
        apply(overlay, live, step, serial)
        assert queried(overlay) == brute(list(live.values()))
        assert {e.id for e in overlay} == set(live) and len(overlay) == len(live)

    assert {e.id: e for e in base} == committed  # nothing reached the index before the fold
    base = overlay.fold_into(base)
    assert queried(base) == brute(list(live.values()))
    assert {e.id: e for e in base} == live
