"""Each Acme policy: when it fires, when it passes, what it depends on, and its cache hint."""

import pytest
from domain_helpers import ask, dependency_keys

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.values import Observed
from invalidation_contracts.domains.acme_billing.policies import (
    ASSIGNED_BY_CSM,
    REPLACED_BY,
    REQUIRES_RECOGNITION,
    SETTLES_UNDER,
    amount_rounding,
    funding_type,
    promo_plan,
    promo_recognition,
    required_promo,
)
from invalidation_contracts.protocol import Action, CacheHint
from invalidation_contracts.server import Rule, evaluate

BASE = {
    "customer": "cus_test",
    "plan": "plan_starter_monthly",
    "payment_method_token": "acme_pm_visa_corporate",
    "amount_cents": 2900,
    "currency": "usd",
}


def run(catalog, pol, **changes):
    state = catalog.domain.registry().state
    return evaluate([pol], {**BASE, **changes}, state.tables, state.rules)


def only(findings):
    assert len(findings) == 1, findings
    return findings[0]


def suggestion(catalog, **changes):
    status, suggestions, _ = ask(catalog, {**BASE, **changes})
    assert status == 422 and len(suggestions) == 1, suggestions
    return suggestions[0]


def test_required_promo_asks_to_add_the_assigned_code(acme):
    finding = only(run(acme, required_promo, plan="plan_partner_growth"))
    v = finding.violation
    assert (v.type, dict(v.parameters), v.action) == (
        "ADD_REQUIRED_PROMO_CODE",
        {"promo_code": "SUMMERSALE25"},
        Action.ADD_FIELD,
    )
    assert dict(v.scope) == {"plan": "plan_partner_growth"}


def test_required_promo_passes_with_the_assigned_code_or_on_an_ungoverned_plan(acme):
    assert run(acme, required_promo, plan="plan_partner_growth", promo_code="SUMMERSALE25") == []
    assert run(acme, required_promo) == []


def test_required_promo_depends_on_the_rows_and_rules_it_read(acme):
    s = suggestion(acme, plan="plan_partner_growth")
    assert dependency_keys(s) == {
        ("required_promo_policy", "plan_partner_growth"),
        ("active_csm_codes", "plan_partner_growth"),
        ("promo_eligibility", "SUMMERSALE25"),
    }
    assert set(map(tuple, s.rules)) == {ASSIGNED_BY_CSM, REQUIRES_RECOGNITION}
    assert s.cache_hint is CacheHint.CACHEABLE and s.table == "active_csm_codes"


def test_required_promo_refuses_without_a_fix_when_the_code_is_not_recognized(acme):
    registry = acme.domain.registry()
    rows = registry.state.snapshot("promo_eligibility").plain_rows()
    del rows["SUMMERSALE25"]
    registry.reload("promo_eligibility", rows)
    status, (s,), _ = ask(acme, {**BASE, "plan": "plan_partner_growth"}, registry)
    assert status == 422 and s.type == "PROMO_CODE_UNAVAILABLE"
    assert s.cache_hint is CacheHint.NO_STORE and s.parameters == {}


def test_funding_rewrites_a_debit_token_to_the_networks_credit_token(acme):
    v = only(
        run(
            acme,
            funding_type,
            plan="plan_enterprise_annual",
            payment_method_token="acme_pm_visa_debit",
        )
    ).violation
    assert (v.type, dict(v.parameters), v.action) == (
        "USE_REQUIRED_FUNDING_TYPE",
        {"payment_method_token": "acme_pm_visa_credit"},
        Action.CONDITIONAL_REWRITE,
    )
    assert dict(v.precondition) == {"payment_method_token": "acme_pm_visa_debit"}


def test_funding_passes_with_a_credit_token_or_on_a_plan_without_the_requirement(acme):
    assert run(acme, funding_type, plan="plan_enterprise_annual") == []
    assert run(acme, funding_type, payment_method_token="acme_pm_visa_debit") == []


def test_funding_depends_on_three_tables_and_their_rows(acme):
    s = suggestion(acme, plan="plan_enterprise_annual", payment_method_token="acme_pm_visa_debit")
    assert [d.table for d in s.tables] == [
        "funding_type_policy",
        "token_funding_map",
        "recommended_credit_token",
    ]
    assert dependency_keys(s) == {
        ("funding_type_policy", "plan_enterprise_annual"),
        ("token_funding_map", "acme_pm_visa_debit"),
        ("recommended_credit_token", "visa"),
    }
    assert [tuple(r) for r in s.rules] == [REPLACED_BY]
    assert s.cache_hint is CacheHint.CACHEABLE and s.table == "recommended_credit_token"


def test_funding_is_scoped_by_the_plan_and_the_token(acme):
    # the plan decides whether the fix is needed, the token which credit token replaces it
    s = suggestion(acme, plan="plan_enterprise_annual", payment_method_token="acme_pm_visa_debit")
    assert s.scope == {
        "plan": "plan_enterprise_annual",
        "payment_method_token": "acme_pm_visa_debit",
    }


def test_funding_publishes_no_patch_since_the_payment_method_is_not_patchable(acme):
    # SPEC §10.4: the customer's instrument stays outside the allowlist, so no published patch
    s = suggestion(acme, plan="plan_enterprise_annual", payment_method_token="acme_pm_visa_debit")
    assert "payment_method_token" not in acme.route.patchable
    assert s.patch is None and s.parameters == {"payment_method_token": "acme_pm_visa_credit"}


def test_a_remembered_funding_fix_is_not_served_to_a_plan_that_accepts_the_token(acme):
    memory = FixMemory("row")
    draft = {**BASE, "plan": "plan_enterprise_annual", "payment_method_token": "acme_pm_visa_debit"}
    _, _, body = ask(acme, draft)
    memory.observe("http://acme.test", Observed(draft, 422, body))
    starter = {**BASE, "payment_method_token": "acme_pm_visa_debit"}

    assert ask(acme, starter)[0] == 200  # plan_starter_monthly accepts the debit token
    assert list(memory.lookup("http://acme.test", starter).entries) == []
    assert [e.type for e in memory.lookup("http://acme.test", draft).entries] == [
        "USE_REQUIRED_FUNDING_TYPE"
    ]


def test_funding_without_a_replacement_rule_refuses_without_a_fix(acme):
    registry = acme.domain.registry()
    registry.set_rules([r for r in registry.state.rules if r.triple != REPLACED_BY])
    _, (s,), _ = ask(
        acme,
        {**BASE, "plan": "plan_enterprise_annual", "payment_method_token": "acme_pm_visa_debit"},
        registry,
    )
    assert (
        s.type == "USE_REQUIRED_FUNDING_TYPE"
        and s.cache_hint is CacheHint.NO_STORE
        and s.parameters == {}
    )


@pytest.mark.parametrize("amount, rounded", [(4999, 5000), (4949, 4900), (49, 100)])
def test_rounding_rounds_half_up_to_whole_units(acme, amount, rounded):
    v = only(run(acme, amount_rounding, amount_cents=amount)).violation
    assert (v.type, dict(v.parameters), v.action) == (
        "ROUND_AMOUNT_TO_WHOLE_UNITS",
        {"amount_cents": rounded},
        Action.REWRITE_VALUE,
    )


def test_rounding_passes_whole_units(acme):
    assert run(acme, amount_rounding, amount_cents=5000) == []


def test_rounding_reads_no_table_so_it_is_recompute(acme):
    s = suggestion(acme, amount_cents=4999)
    assert s.cache_hint is CacheHint.RECOMPUTE and s.tables is None and s.table is None


def test_recognition_drops_an_unknown_code(acme):
    s = suggestion(acme, promo_code="NOSUCHCODE")
    assert (s.type, s.parameters, s.action) == (
        "REMOVE_UNRECOGNIZED_PROMO_CODE",
        {"promo_code": None},
        Action.REWRITE_VALUE,
    )
    assert (
        dependency_keys(s) == {("promo_eligibility", "NOSUCHCODE")}
        and s.cache_hint is CacheHint.CACHEABLE
    )


def test_recognition_passes_a_known_code_and_a_request_without_one(acme):
    assert run(acme, promo_recognition, promo_code="WELCOME10") == []
    assert run(acme, promo_recognition) == []


def test_recognition_drops_a_csm_code_while_csm_assignments_are_not_declared(acme):
    registry = acme.domain.registry()
    registry.set_rules([r for r in registry.state.rules if r.triple != ASSIGNED_BY_CSM])
    _, (s,), _ = ask(
        acme, {**BASE, "plan": "plan_partner_growth", "promo_code": "SUMMERSALE25"}, registry
    )
    assert s.type == "REMOVE_UNRECOGNIZED_PROMO_CODE"


def test_plan_policy_drops_a_code_that_does_not_settle_under_the_plan(acme):
    s = suggestion(acme, promo_code="WELCOME10")
    assert (s.type, s.parameters) == ("REMOVE_INELIGIBLE_PROMO_CODE", {"promo_code": None})
    assert dependency_keys(s) == {("promo_eligibility", "WELCOME10")}
    assert [tuple(r) for r in s.rules] == [SETTLES_UNDER]


def test_plan_policy_passes_on_a_plan_the_code_lists(acme):
    assert run(acme, promo_plan, plan="plan_enterprise_annual", promo_code="WELCOME10") == []


def test_plan_policy_is_not_enforced_without_its_rule(acme_rules):
    assert Rule(*SETTLES_UNDER, via="plans") not in acme_rules.domain.rules
    assert run(acme_rules, promo_plan, promo_code="WELCOME10") == []
