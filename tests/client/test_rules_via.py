"""A rule that changes its ``via`` (which from-row field names the to-row) moves what the
rules strategies compare: the fixes that relied on it go, the others stay (issue 38). A fix
carries each rule's ``via`` (``rule_vias``), so no earlier listing is needed; fixes from a server
predating the field are compared against the last listing read."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from tests.client.conftest import R_CREDIT, R_EXTRA, R_PROMO, FakeOrigin, standard_tables

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.client.events import Evicted, FetchRules, Restamped
from invalidation_contracts.client.values import Answer, Observed
from invalidation_contracts.protocol.models import (
    Action,
    RuleDeclaration,
    RulesListing,
    Suggestion,
)
from invalidation_contracts.server.feedback import rule_vias
from invalidation_contracts.server.opaque import OpaqueNames

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
    pytest.param("plan", ("via", R_PROMO, None), False, PROMO_FIXES, id="unread-via-dropped"),
    pytest.param("plan", ("add", R_EXTRA, None), False, set(), id="unread-via-kept"),
    pytest.param(None, ("add", R_EXTRA, None), False, set(), id="unread-unrelated-rule-added"),
]

# A server predating ``rule_vias``: the listing read before is all the client has.
LEGACY_CASES = [
    pytest.param("plan", ("via", R_PROMO, "tier"), True, PROMO_FIXES, id="via-changed"),
    pytest.param("plan", ("via", R_PROMO, None), True, PROMO_FIXES, id="via-dropped"),
    pytest.param("plan", ("via", R_PROMO, "tier"), False, PROMO_FIXES, id="unread-via-changed"),
    # Unseen without the field: nothing says the rule had a ``via`` when the fix was made.
    pytest.param("plan", ("via", R_PROMO, None), False, set(), id="unread-via-dropped"),
    pytest.param("plan", ("add", R_EXTRA, None), False, PROMO_FIXES, id="unread-via-kept"),
]


@pytest.mark.parametrize("strategy", ["rules-oracle", "rules-stamp+vectors"])
@pytest.mark.parametrize(("before", "change", "read_first", "evicted"), CASES)
def test_a_rule_that_changes_its_via_evicts_the_fixes_that_relied_on_it(
    server, standard_fixes, strategy, before, change, read_first, evicted
):
    _check_via_change(server, standard_fixes, strategy, before, change, read_first, evicted)


@pytest.mark.parametrize("strategy", ["rules-oracle", "rules-stamp+vectors"])
@pytest.mark.parametrize(("before", "change", "read_first", "evicted"), LEGACY_CASES)
def test_fixes_without_rule_vias_are_compared_with_the_last_listing_read(
    server, standard_fixes, strategy, before, change, read_first, evicted
):
    server.sends_vias = False
    _check_via_change(server, standard_fixes, strategy, before, change, read_first, evicted)


def _check_via_change(server, standard_fixes, strategy, before, change, read_first, evicted):
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


@pytest.mark.parametrize("sends_vias", [True, False], ids=["rule-vias", "legacy"])
def test_a_failure_after_a_via_change_evicts_the_fix_it_rerouted(
    server, standard_fixes, sends_vias
):
    """rules-stamp+vectors judges entries by the failure's suggestions: a same-type fix whose
    rule now has another ``via`` evicts the older one (without ``rule_vias`` it was restamped,
    and the later listing, stamped alike, never saw the change)."""
    server.sends_vias = sends_vias
    memory = FixMemory("rules-stamp+vectors")
    server.set_via(R_PROMO, "plan")
    _learn(memory, server, standard_fixes(server)[:1])
    _read_rules(memory, server)
    server.set_via(R_PROMO, "tier")

    _learn(memory, server, [_promo(server, "plan_b")])
    _read_rules(memory, server)

    survivors = {e.key.scope_fields["plan"] for e in memory.entries(server.url)}
    assert survivors == ({"plan_b"} if sends_vias else {"plan_a", "plan_b"})


def _promo(server: FakeOrigin, plan: str) -> dict[str, Any]:
    return server.fix(
        "ADD_PROMO",
        {"promo_code": "SUMMER"},
        scope={"plan": plan},
        reads={"codes": [plan]},
        rules=[R_PROMO],
    )


VIAS = st.sampled_from([None, "plan", "tier"])
# How a ``via`` change reaches the memory: a listing read after the next answer, a failure of the
# fix's type (judged by rules-stamp+vectors; the oracle holds it until a listing), or nothing yet.
HOW = st.sampled_from(["listing", "failure", "unseen"])


@settings(max_examples=80, deadline=None)
@given(
    strategy=st.sampled_from(["rules-oracle", "rules-stamp+vectors"]),
    start=VIAS,
    read_first=st.booleans(),
    moves=st.lists(st.tuples(VIAS, HOW), min_size=1, max_size=5),
)
def test_after_any_run_of_via_changes_a_fix_stays_iff_its_rule_routes_as_it_learned(
    strategy, start, read_first, moves
):
    """Brute force: a fix learned while R_PROMO followed ``start`` survives a run of ``via``
    changes, whether or not a listing was read first, iff R_PROMO follows ``start`` at every point
    the strategy judges it (a listing read; for rules-stamp+vectors also a same-type failure) and
    at the final listing read."""
    server = FakeOrigin(standard_tables(), {R_PROMO, R_CREDIT})
    memory = FixMemory(strategy)
    server.set_via(R_PROMO, start)
    _learn(memory, server, [_promo(server, "plan_a")])
    if read_first:
        _read_rules(memory, server)
    judged: list[str | None] = []
    for n, (via, how) in enumerate(moves):
        server.set_via(R_PROMO, via)
        if how == "listing":
            _dispose(memory, server)
            judged.append(via)
        elif how == "failure":
            _learn(memory, server, [_promo(server, f"plan_{n}")])
            if strategy == "rules-stamp+vectors":
                judged.append(via)
    _dispose(memory, server)
    judged.append(moves[-1][0])

    survives = all(via == start for via in judged)
    plans = {e.key.scope_fields["plan"] for e in memory.entries(server.url)}
    assert ("plan_a" in plans) == survives


# -- the wire: the field, the server's filling, opaque names ---------------------------------------

R_PLAIN = ("plans", "funding_types", "allows_invoice")


@pytest.mark.parametrize(
    ("rules", "vias", "sent"),
    [
        pytest.param([R_PROMO], {R_PROMO: "plan"}, ["plan"], id="one-via"),
        pytest.param([R_PLAIN, R_PROMO], {R_PROMO: "plan"}, [None, "plan"], id="aligned"),
        pytest.param([R_PLAIN], {R_PROMO: "plan"}, None, id="none-of-its-rules"),
        pytest.param([], {R_PROMO: "plan"}, None, id="no-rules"),
    ],
)
def test_the_server_sends_rule_vias_only_when_a_rule_of_the_fix_has_one(rules, vias, sent):
    assert rule_vias(rules, vias) == sent


@pytest.mark.parametrize(
    ("fields", "vias"),
    [
        pytest.param({"rules": [R_PROMO], "rule_vias": ["plan"]}, {R_PROMO: "plan"}, id="sent"),
        pytest.param({"rules": [R_PROMO]}, None, id="absent"),
    ],
)
def test_a_suggestion_maps_each_rule_to_its_via(fields, vias):
    suggestion = Suggestion(type="T", parameters={}, action=Action.ADD_FIELD, **fields)
    assert suggestion.vias() == vias


def test_a_suggestion_with_a_via_per_rule_missing_is_refused():
    with pytest.raises(ValidationError, match="rule_vias has 2 items for 1 rules"):
        Suggestion.model_validate(
            {"type": "T", "parameters": {}, "action": "add_field", "rules": [R_PROMO]}
            | {"rule_vias": ["plan", None]}
        )


def test_opaque_names_tag_each_via_beside_its_rule_and_in_the_listing():
    names = OpaqueNames(b"opaque-names-test-secret")
    suggestion = Suggestion(
        type="T",
        parameters={},
        action=Action.ADD_FIELD,
        rules=[R_PROMO, R_CREDIT],
        rule_vias=["plan", None],
    )
    listing = RulesListing(
        rules_version="0" * 12,
        rules=[
            RuleDeclaration(
                from_table=R_PROMO[0], to_table=R_PROMO[1], relation=R_PROMO[2], via="plan"
            ),
            RuleDeclaration(from_table=R_CREDIT[0], to_table=R_CREDIT[1], relation=R_CREDIT[2]),
        ],
    )

    tagged = names.suggestion(suggestion).vias()
    listed = {rule.triple: rule.via for rule in names.rules_listing(listing).rules}

    assert (
        tagged
        == listed
        == {
            names.triple(R_PROMO): names.via(R_PROMO[0], "plan"),
            names.triple(R_CREDIT): None,
        }
    )
