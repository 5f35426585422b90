"""The rules stream (paper Table 5): removing one rule edge makes exactly the fixes that relied on
it stale; adding one creates a constraint that fails requests until learned."""

from domain_helpers import applied, ask, first_fix

from invalidation_contracts.domains.acme_billing.policies import ASSIGNED_BY_CSM, SETTLES_UNDER

RULE_FAMILIES = [
    "governed-partner-growth",
    "control-partner-starter",
    "control-agency-pro",
    "funding-enterprise-annual",
]


def set_rules(registry, catalog, name):
    return registry.set_rules(catalog.read_rule_set(name))


def test_removal_drops_one_edge_and_addition_then_adds_one(acme_rules):
    registry = acme_rules.domain.registry()
    removal = set_rules(registry, acme_rules, "rule-removal")
    addition = set_rules(registry, acme_rules, "rule-addition")
    assert (removal.removed, removal.added) == ([ASSIGNED_BY_CSM], [])
    assert (addition.removed, addition.added) == ([], [SETTLES_UNDER])
    assert (
        len({removal.old_rules_version, removal.new_rules_version, addition.new_rules_version}) == 3
    )


def test_removal_makes_stale_exactly_the_fixes_that_relied_on_the_rule(acme_rules):
    registry = acme_rules.domain.registry()
    memory = {fid: first_fix(acme_rules, fid, registry) for fid in RULE_FAMILIES}
    set_rules(registry, acme_rules, "rule-removal")
    relied = {fid for fid, s in memory.items() if list(ASSIGNED_BY_CSM) in map(list, s.rules or ())}
    stale = {
        fid
        for fid, s in memory.items()
        if not acme_rules.is_fix_current(s, acme_rules.family(fid).fields, registry.state)
    }
    assert (
        stale
        == relied
        == {"governed-partner-growth", "control-partner-starter", "control-agency-pro"}
    )


def test_injecting_a_fix_that_relied_on_the_removed_rule_fails(acme_rules):
    registry = acme_rules.domain.registry()
    fix = first_fix(acme_rules, "governed-partner-growth", registry)
    set_rules(registry, acme_rules, "rule-removal")
    draft = acme_rules.family("governed-partner-growth").draft()
    status, (new,), _ = ask(acme_rules, applied(draft, fix), registry)
    assert status == 422 and new.type == "REMOVE_UNRECOGNIZED_PROMO_CODE"
    assert ask(acme_rules, draft, registry)[0] == 200


def test_a_fix_on_another_rule_survives_the_removal(acme_rules):
    registry = acme_rules.domain.registry()
    fix = first_fix(acme_rules, "funding-enterprise-annual", registry)
    set_rules(registry, acme_rules, "rule-removal")
    draft = acme_rules.family("funding-enterprise-annual").draft()
    assert acme_rules.is_fix_current(fix, draft, registry.state)
    assert ask(acme_rules, applied(draft, fix), registry)[0] == 200


def test_addition_creates_a_constraint_that_fails_until_learned(acme_rules):
    registry = acme_rules.domain.registry()
    draft = acme_rules.family("promo-ineligible-starter").draft()
    set_rules(registry, acme_rules, "rule-removal")
    assert ask(acme_rules, draft, registry)[0] == 200
    set_rules(registry, acme_rules, "rule-addition")
    fix = first_fix(acme_rules, "promo-ineligible-starter", registry)
    assert fix.type == "REMOVE_INELIGIBLE_PROMO_CODE" and [tuple(r) for r in fix.rules] == [
        SETTLES_UNDER
    ]
    assert ask(acme_rules, applied(draft, fix), registry)[0] == 200


def test_the_rules_stream_serves_the_same_tables_and_policies(acme, acme_rules):
    assert acme_rules.domain.tables.keys() == acme.domain.tables.keys()
    assert acme_rules.route.policies == acme.route.policies
    assert {r.triple for r in acme.domain.rules} - {r.triple for r in acme_rules.domain.rules} == {
        SETTLES_UNDER
    }
