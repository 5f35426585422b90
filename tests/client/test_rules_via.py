"""A rule that changes its ``via`` (which from-row field names the to-row) moves what the
rules strategies compare: the fixes that relied on it go, the others stay (issue 38)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.client.conftest import R_CREDIT, R_EXTRA, R_PROMO, FakeOrigin, standard_tables

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.client.events import Evicted, FetchRules, Restamped
from invalidation_contracts.client.values import Answer, Observed

PROMO_FIXES = {"e1", "e2"}  # standard_fixes: e1, e2 rely on R_PROMO; e3 on R_CREDIT


def _learn(memory: FixMemory, server: FakeOrigin, fixes: list[dict[str, Any]]) -> None:
    memory.observe(server.url, Observed(None, 422, server.failure(*fixes)))


def _read_rules(memory: FixMemory, server: FakeOrigin) -> Any:
    return memory.answer(FetchRules(server.url), Answer.rules(server.rules_listing()))


def _dispose(memory: FixMemory, server: FakeOrigin) -> Any:
    """The next answer shows the moved stamp; the listing in force is read."""
    memory.observe(server.url, Observed(None, 200, server.success()))
    return _read_rules(memory, server)


def _evicted(obs: Any) -> set[str]:
    return {e.entry_id for e in obs.of(Evicted) if e.reason is EvictionReason.RULES}


CASES = [
    # (via before, change, read at learning, evicted)
    pytest.param(None, ("via", R_PROMO, "plan"), True, PROMO_FIXES, id="via-added"),
    pytest.param("plan", ("via", R_PROMO, "tier"), True, PROMO_FIXES, id="via-changed"),
    pytest.param("plan", ("via", R_PROMO, None), True, PROMO_FIXES, id="via-dropped"),
    pytest.param("plan", ("add", R_EXTRA, None), True, set(), id="unrelated-rule-added"),
    pytest.param(None, ("via", R_CREDIT, "owner"), True, {"e3"}, id="other-rule-via"),
    pytest.param(None, ("via", R_PROMO, "plan"), False, PROMO_FIXES, id="unread-via-added"),
    pytest.param("plan", ("via", R_PROMO, "tier"), False, PROMO_FIXES, id="unread-via-changed"),
    pytest.param(None, ("add", R_EXTRA, None), False, set(), id="unread-unrelated-rule-added"),
]


@pytest.mark.parametrize("strategy", ["rules-oracle", "rules-stamp+vectors"])
@pytest.mark.parametrize(("before", "change", "read_first", "evicted"), CASES)
def test_a_rule_that_changes_its_via_evicts_the_fixes_that_relied_on_it(
    server, standard_fixes, strategy, before, change, read_first, evicted
):
    memory = FixMemory(strategy)
    server.set_via(R_PROMO, before)
    _learn(memory, server, standard_fixes(server))
    if read_first:
        _read_rules(memory, server)
    kind, rule, via = change
    if kind == "via":
        server.set_via(rule, via)
    else:
        server.set_rules(server.rules | {rule})

    obs = _dispose(memory, server)

    assert _evicted(obs) == evicted
    kept = {"e1", "e2", "e3"} - evicted
    assert {e.entry_id for e in obs.of(Restamped)} == kept
    assert {e.id for e in memory.entries(server.url)} == kept


def test_the_eviction_names_the_rule_and_both_vias(server, standard_fixes):
    memory = FixMemory("rules-oracle")
    server.set_via(R_PROMO, "plan")
    _learn(memory, server, standard_fixes(server))
    _read_rules(memory, server)
    server.set_via(R_PROMO, "tier")

    (first, _) = [e for e in _dispose(memory, server).of(Evicted)]

    assert first.detail == f"rule {list(R_PROMO)} changed its via from 'plan' to 'tier'"


VIAS = st.sampled_from([None, "plan", "tier"])


@settings(max_examples=60, deadline=None)
@given(start=VIAS, moves=st.lists(VIAS, min_size=1, max_size=5))
def test_after_any_run_of_via_changes_a_fix_stays_iff_its_rule_routes_as_it_learned(start, moves):
    """Brute force: a fix learned while R_PROMO followed ``start`` is served after a run of
    ``via`` changes (each read by the oracle) iff R_PROMO follows ``start`` at every read."""
    server = FakeOrigin(standard_tables(), {R_PROMO, R_CREDIT})
    memory = FixMemory("rules-oracle")
    server.set_via(R_PROMO, start)
    fix = server.fix(
        "ADD_PROMO",
        {"promo_code": "SUMMER"},
        scope={"plan": "plan_a"},
        reads={"codes": ["plan_a"]},
        rules=[R_PROMO],
    )
    _learn(memory, server, [fix])
    _read_rules(memory, server)
    for via in moves:
        server.set_via(R_PROMO, via)
        _dispose(memory, server)

    survives = all(via == start for via in moves)
    assert [e.id for e in memory.entries(server.url)] == (["e1"] if survives else [])
