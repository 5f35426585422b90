"""The rules fingerprint covers everything that changes a fix (reliability audit 2, N13).

A policy reads rules through ``RuleSet.find`` and follows them with ``Rule.targets``; redeclaring
a rule with another ``via`` links other rows, so the fix changes. Brute force: over every rule
set of a small alphabet, two sets whose answers differ for some lookup on some rows have
different ``rules_version``s.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.protocol.problems import ProtocolError
from invalidation_contracts.server import Rule
from invalidation_contracts.server.rules import RuleSet

TABLES = ["a", "b", "c"]
RELATIONS = ["r", "s"]
ROWS = {"k1": {"x": "k2", "y": ["k1", "k3"]}, "k2": {"x": "k1"}, "k3": {"y": "k2"}}

rules = st.builds(
    Rule,
    st.sampled_from(TABLES),
    st.sampled_from(TABLES),
    st.sampled_from(RELATIONS),
    st.sampled_from([None, "x", "y"]),
)
rule_sets = st.lists(rules, max_size=4, unique_by=lambda r: r.triple).map(RuleSet)


def answers(ruleset: RuleSet) -> dict[tuple[str, str, str | None], object]:
    """What every policy lookup finds, and which rows each rule found links."""
    out: dict[tuple[str, str, str | None], object] = {}
    for f, t, rel in itertools.product(TABLES, TABLES, [*RELATIONS, None]):
        found = ruleset.find(f, t, rel)
        out[f, t, rel] = sorted(
            (r.relation, [(k, r.targets(k, row)) for k, row in sorted(ROWS.items())]) for r in found
        )
    return out


@settings(max_examples=500, deadline=None)
@given(rule_sets, rule_sets)
def test_any_declaration_change_that_changes_an_answer_moves_the_fingerprint(one, other):
    if answers(one) != answers(other):
        assert one.version != other.version
    else:
        assert one.version == other.version


def test_redeclaring_a_rule_with_another_via_moves_the_fingerprint():
    before = RuleSet([Rule("codes", "eligible", "requires", via="code")])
    after = RuleSet([Rule("codes", "eligible", "requires", via="alt_code")])
    assert before.version != after.version


def test_a_rule_without_via_keeps_the_fingerprint_of_its_triple():
    rule = Rule("active_csm_codes", "promo_eligibility", "requires_recognition")
    assert RuleSet([rule]).version == "0d1c431f7ac2"  # SPEC §6's example


@pytest.mark.parametrize("via", [None, "code"])
def test_a_rule_declared_twice_is_refused_even_when_identical(via):
    rule = Rule("codes", "eligible", "requires", via=via)
    with pytest.raises(ProtocolError, match="declared twice"):
        RuleSet([rule, rule])
