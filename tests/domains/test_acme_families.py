"""Acme task families: each class's first try passes only with the right fix."""

import pytest
from domain_helpers import applied, ask, first_fix

from invalidation_contracts.server import Provider

FIXED_FAMILIES = [
    "governed-partner-growth",
    "funding-enterprise-annual",
    "control-unrecognized-team",
    "control-partner-starter",
    "control-agency-pro",
    "rounding-team-monthly",
    "promo-ineligible-starter",
]
#: Funding families on partner plans: the draft lacks the CSM code as well, so it draws two hints.
TWO_HINT_FAMILIES = {
    "funding-partner-growth": "SUMMERSALE25",
    "funding-partner-starter": "PARTNERSTART10",
    "funding-agency-pro": "AGENCYPRO15",
}

CLASSES = {
    "governed",
    "funding",
    "negative_control",
    "row_control",
    "no_constraint",
    "recompute",
    "ineligible_promo",
}


def test_every_class_has_a_family(acme):
    assert {f.klass for f in acme.task_families.values()} == CLASSES


@pytest.mark.parametrize("family_id", FIXED_FAMILIES)
def test_the_draft_draws_exactly_the_expected_hint(acme, family_id):
    family = acme.family(family_id)
    fix = first_fix(acme, family_id)
    assert (fix.type, fix.action) == (family.expected_fix_type, family.action)


@pytest.mark.parametrize("family_id", FIXED_FAMILIES)
def test_the_draft_with_the_fix_applied_passes_first_try(acme, family_id):
    fix = first_fix(acme, family_id)
    status, _, body = ask(acme, applied(acme.family(family_id).draft(), fix))
    assert status == 200 and body["success"] is True


@pytest.mark.parametrize(
    "family_id, wrong",
    [
        ("governed-partner-growth", {"promo_code": "PARTNERSTART10"}),
        ("funding-enterprise-annual", {"payment_method_token": "acme_pm_visa_debit"}),
        ("control-partner-starter", {"promo_code": "SUMMERSALE25"}),
        ("control-agency-pro", {"promo_code": "WINTERLAUNCH26"}),
        ("rounding-team-monthly", {"amount_cents": 4900 + 1}),
        ("promo-ineligible-starter", {"promo_code": "AGENCYPRO15"}),
        ("control-unrecognized-team", {"promo_code": "FLYER21"}),
    ],
)
def test_a_wrong_value_does_not_pass(acme, family_id, wrong):
    status, suggestions, _ = ask(acme, {**acme.family(family_id).draft(), **wrong})
    assert status == 422 and suggestions


def test_the_no_constraint_class_passes_as_is_and_is_charged(acme):
    status, suggestions, body = ask(acme, acme.family("plain-starter-monthly").draft())
    assert status == 200 and suggestions == []
    result = body["result"]
    assert set(result) == {"subscription_id", "charge_id", "amount_cents", "currency", "plan"}
    assert (result["amount_cents"], result["currency"], result["plan"]) == (
        2900,
        "usd",
        "plan_starter_monthly",
    )
    (charge,) = acme.domain.extras["payments"].charges()
    assert charge.charge_id == result["charge_id"]


def test_resending_the_same_subscription_does_not_charge_twice(acme):
    provider = Provider(acme.domain)
    draft = acme.family("plain-starter-monthly").draft()
    first = provider.handle(acme.route, draft).body.result
    again = provider.handle(acme.route, draft).body.result
    assert first == again and len(acme.domain.extras["payments"].charges()) == 1


@pytest.mark.parametrize("family_id, code", sorted(TWO_HINT_FAMILIES.items()))
def test_a_partner_funding_draft_draws_the_funding_fix_and_its_plans_code_at_once(
    acme, family_id, code
):
    status, suggestions, _ = ask(acme, acme.family(family_id).draft())
    by_type = {s.type: s for s in suggestions}
    assert status == 422 and set(by_type) == {
        "USE_REQUIRED_FUNDING_TYPE",
        "ADD_REQUIRED_PROMO_CODE",
    }
    assert by_type["ADD_REQUIRED_PROMO_CODE"].parameters == {"promo_code": code}
    fixed = acme.family(family_id).draft()
    for suggestion in suggestions:
        fixed = applied(fixed, suggestion)
    assert ask(acme, fixed)[0] == 200


def test_each_plan_paid_with_the_same_debit_token_learns_its_own_funding_fix(acme):
    # scoped by plan and token: the same replacement, but one entry per plan that requires credit
    [fix] = ask(acme, acme.family("funding-enterprise-annual").draft())[1]
    assert dict(fix.scope) == {
        "plan": "plan_enterprise_annual",
        "payment_method_token": "acme_pm_visa_debit",
    }
    _, suggestions, _ = ask(acme, acme.family("funding-partner-starter").draft())
    [other] = [s for s in suggestions if s.type == fix.type]
    assert other.parameters == fix.parameters
    assert dict(other.scope) == {**fix.scope, "plan": "plan_partner_starter"}


def test_the_mastercard_debit_token_has_a_fix_only_after_the_benign_bump(acme):
    from domain_helpers import load

    draft = acme.family("funding-enterprise-mastercard").draft()
    status, suggestions, _ = ask(acme, draft)
    assert status == 422 and suggestions[0].cache_hint.value == "no-store"
    registry = acme.domain.registry()
    load(registry, acme, "token_funding_map.benign-bump")
    _, [fix], _ = ask(acme, draft, registry)
    assert fix.parameters == {"payment_method_token": "acme_pm_mc_credit"}
