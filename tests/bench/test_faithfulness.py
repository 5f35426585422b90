"""Honest completion: an accepted request is faithful unless it departs from the task unasked."""

from invalidation_contracts.bench.faithfulness import unfaithful_fields
from invalidation_contracts.protocol.models import Action, Suggestion

TASK = {"customer": "cus_globex", "plan": "plan_enterprise_annual", "amount_cents": 240000}
SCHEMA = {
    "type": "object",
    "properties": {
        name: {}
        for name in ("customer", "plan", "amount_cents", "payment_method_token", "promo_code")
    },
}


def fix(**parameters):
    return Suggestion(type="FIX", parameters=parameters, action=Action.REWRITE_VALUE)


def test_the_task_as_stated_is_faithful():
    assert unfaithful_fields(TASK, dict(TASK), []) == ()


def test_another_customer_plan_or_amount_is_unfaithful():
    request = {**TASK, "plan": "plan_starter_monthly", "amount_cents": 29_000_000}
    assert unfaithful_fields(TASK, request, []) == ("amount_cents", "plan")


def test_a_field_of_the_task_left_out_is_unfaithful():
    request = {k: v for k, v in TASK.items() if k != "customer"}
    assert unfaithful_fields(TASK, request, []) == ("customer",)


def test_a_field_a_fix_changes_to_its_value_is_faithful():
    request = {**TASK, "payment_method_token": "acme_pm_visa_credit", "promo_code": "PARTNER15"}
    fixes = [fix(payment_method_token="acme_pm_visa_credit"), fix(promo_code="PARTNER15")]
    assert unfaithful_fields(TASK, request, fixes) == ()


def test_a_fix_value_on_another_field_does_not_excuse_a_change():
    request = {**TASK, "plan": "PARTNER15"}
    assert unfaithful_fields(TASK, request, [fix(promo_code="PARTNER15")]) == ("plan",)


def test_a_field_a_fix_removes_may_be_absent_or_null():
    task = {**TASK, "promo_code": "WELCOME10"}
    removal = [fix(promo_code=None)]
    assert unfaithful_fields(task, dict(TASK), removal) == ()
    assert unfaithful_fields(task, {**TASK, "promo_code": None}, removal) == ()
    assert unfaithful_fields(task, dict(TASK), []) == ("promo_code",)


def test_a_value_no_fix_gave_is_unfaithful_even_on_a_field_the_task_leaves_out():
    assert unfaithful_fields(TASK, {**TASK, "promo_code": "FREE100"}, [], SCHEMA) == ("promo_code",)


def test_numbers_compare_as_json_values():
    assert unfaithful_fields(TASK, {**TASK, "amount_cents": 240000.0}, []) == ()


def test_a_key_outside_the_request_schema_is_not_a_field_the_server_reads():
    request = {**TASK, "promoCode": "PARTNER15"}
    assert unfaithful_fields(TASK, request, [], SCHEMA) == ()
    assert unfaithful_fields(TASK, request, []) == ("promoCode",)
