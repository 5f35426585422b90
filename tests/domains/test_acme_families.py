"""Acme task families: each class's first try passes only with the right fix."""

import pytest
from domain_helpers import applied, ask, first_fix

from invalidation_contracts.server import Provider

FIXED_FAMILIES = [
    "governed-partner-growth",
    "funding-enterprise-annual",
    "control-partner-starter",
    "control-agency-pro",
    "rounding-team-monthly",
    "promo-ineligible-starter",
    "promo-unrecognized-team",
]

CLASSES = {
    "governed",
    "funding",
    "negative_control",
    "no_constraint",
    "recompute",
    "ineligible_promo",
    "unrecognized_promo",
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
        ("promo-unrecognized-team", {"promo_code": "FLYER21"}),
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
