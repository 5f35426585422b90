"""Property: key-set (membership) dependencies are exact, end to end (SPEC §1, §5.2, §9).

Random tables, a random policy program (key lookups, ``in``, iteration, ``len``, ``items()``,
following a row's reference to another key), and random drift (keys added and removed, row
contents changed, several tables in one change set). The provider's read tracking produces the
dependency vector; the real memory, under every row-level arm, judges each drift from the changes
feed. A brute-force oracle replays the program's reads on the tables after the drift: the fix is
evicted exactly when one of its observations differs.

What a read observes is what the protocol can depend on: a key lookup (``t[k]``, ``t.get(k)``,
``k in t``) observes row ``k`` (its contents, or its absence); iteration and ``len`` observe the
key set; ``items()`` observes the whole table. A program that follows a reference reads the key the
row named when the fix was learned, so equal observations mean the program takes the same path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from invalidation_contracts.client import FetchChanges, FixMemory
from invalidation_contracts.client.values import Answer, Observed
from invalidation_contracts.protocol import Action
from invalidation_contracts.server import (
    Domain,
    Provider,
    Route,
    TableChange,
    TableSpec,
    TrackedTables,
    Violation,
    policy,
)

ORIGIN = "http://membership.test"
OPERATION = "POST /v1/check"
KEYS = ["k0", "k1", "k2", "k3", "k4"]
TABLES = ["t", "u"]
ROW_ARMS = ["row", "row+consumers", "row+graph", "rules-oracle", "rules-stamp+vectors"]
DRAFT = {"q": "learn"}
PASSING = {"q": "pass"}

row = st.fixed_dictionaries({"v": st.integers(0, 2)}, optional={"ref": st.sampled_from(KEYS)})
table = st.dictionaries(st.sampled_from(KEYS), row, max_size=len(KEYS))
tables = st.fixed_dictionaries({name: table for name in TABLES})
op = st.one_of(
    st.tuples(
        st.sampled_from(["get", "item", "in", "follow"]),
        st.sampled_from(TABLES),
        st.sampled_from(KEYS),
    ),
    st.tuples(st.sampled_from(["iter", "len", "items"]), st.sampled_from(TABLES), st.none()),
)
programs = st.lists(op, min_size=1, max_size=4)
drifts = st.lists(tables, min_size=1, max_size=3)


class Check(BaseModel):
    q: str


def run(program: list[tuple[str, str, str | None]], view: Any) -> list[tuple[Any, ...]]:
    """Run ``program`` over ``view`` (tracked tables, or plain dicts); the observations it made.

    Each observation is ``(kind, table, key, value)`` where ``value`` is what the protocol can
    depend on (see the module docstring), so the oracle compares like with like.
    """
    seen: list[tuple[Any, ...]] = []
    for kind, name, key in program:
        t = view[name]
        if kind in ("get", "follow"):
            found = t.get(key)
            seen.append(("row", name, key, _plain(found)))
            ref = found.get("ref") if kind == "follow" and found is not None else None
            if isinstance(ref, str):
                seen.append(("row", name, ref, _plain(t.get(ref))))
        elif kind == "item":
            try:
                seen.append(("row", name, key, _plain(t[key])))
            except KeyError:
                seen.append(("row", name, key, None))
        elif kind == "in":
            present = key in t
            seen.append(("row", name, key, _plain(_rows(view, name).get(key)) if present else None))
        elif kind == "iter":
            seen.append(("keys", name, None, frozenset(iter(t))))
        elif kind == "len":
            len(t)
            seen.append(("keys", name, None, frozenset(_rows(view, name))))
        else:
            seen.append(("table", name, None, {k: _plain(v) for k, v in t.items()}))
    return seen


def _rows(view: Any, name: str) -> dict[str, Any]:
    """The rows of ``name`` as a plain dict, read around the tracking (the oracle's own look)."""
    if isinstance(view, TrackedTables):
        return dict(view._snapshots[name].rows)  # noqa: SLF001 - the test's oracle, not the policy
    return dict(view[name])


def _plain(row: Any) -> Any:
    return None if row is None else {k: row[k] for k in sorted(row)}


def domain_for(program: list[tuple[str, str, str | None]], initial: dict[str, Any]) -> Domain:
    @policy("program")
    def check(request: Mapping[str, Any], view: TrackedTables) -> Violation | None:
        if request["q"] == "pass":
            return None
        run(program, view)
        return Violation(
            "PROGRAM_FIX",
            "the program's answer",
            {"q": "fixed"},
            Action.REWRITE_VALUE,
            scope={"q": request["q"]},
        )

    return Domain(
        "membership",
        {name: TableSpec(rows) for name, rows in initial.items()},
        [],
        [Route("/v1/check", Check, [check])],
    )


def settle(memory: FixMemory, registry: Any, needs: tuple[Any, ...]) -> None:
    for _ in range(5):
        if not needs:
            return
        follow: list[Any] = []
        for need in needs:
            assert isinstance(need, FetchChanges), need
            feed = registry.changes(need.since, epoch=need.epoch)
            follow.extend(memory.answer(need, Answer.changes(feed)).needs)
        needs = tuple(follow)
    raise AssertionError("needs did not settle")


@settings(max_examples=150, deadline=None)
@given(initial=tables, program=programs, steps=drifts, arm=st.sampled_from(ROW_ARMS))
def test_a_fix_is_evicted_exactly_when_an_observation_it_made_changes(initial, program, steps, arm):
    domain = domain_for(program, initial)
    registry = domain.registry()
    provider = Provider(domain, registry)
    route = domain.routes[0]
    memory = FixMemory(arm)
    learned = provider.handle(route, DRAFT)
    settle(
        memory,
        registry,
        memory.observe(
            ORIGIN, Observed(DRAFT, 422, learned.body.to_wire()), operation=OPERATION
        ).needs,
    )
    assert len(memory.entries(ORIGIN)) == 1
    before = run(program, {name: dict(rows) for name, rows in initial.items()})

    stale = False
    for rows in steps:
        registry.apply({name: TableChange.reload(rows[name]) for name in TABLES})
        stale = stale or run(program, rows) != before
        answer = provider.handle(route, PASSING)
        settle(
            memory,
            registry,
            memory.observe(
                ORIGIN, Observed(PASSING, 200, answer.body.to_wire()), operation=OPERATION
            ).needs,
        )
        assert (memory.entries(ORIGIN) == []) is stale, (program, rows)
