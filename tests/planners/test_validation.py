"""Client-side reply checks: only a body the request schema accepts becomes a plan."""

from __future__ import annotations

import pytest

from invalidation_contracts.domains import get_catalog
from invalidation_contracts.planners import PlannerResponseError
from invalidation_contracts.planners.validation import check_request, echoes_schema

SCHEMA = get_catalog("acme_billing").route.request_model.model_json_schema()
BODY = {
    "customer": "cus_globex",
    "plan": "plan_partner_growth",
    "payment_method_token": "acme_pm_visa_corporate",
    "amount_cents": 19900,
    "currency": "usd",
}


def test_a_body_the_schema_accepts_is_returned_as_is():
    assert check_request(dict(BODY), SCHEMA, raw=None) == BODY


def test_the_echo_small_models_give_in_json_object_mode_is_refused():
    # What Qwen2.5-Coder-0.5B answered in json_object mode (evidence D7).
    echo = {"type": "object", "properties": {"customer": "cus_globex", "plan": "plan_x"}}
    with pytest.raises(PlannerResponseError, match="echoes the JSON Schema") as caught:
        check_request(echo, SCHEMA, raw="{...}")
    assert caught.value.raw == "{...}"


def test_a_property_named_like_a_schema_keyword_is_not_an_echo():
    schema = {"type": "object", "properties": {"type": {"type": "string"}}}
    assert not echoes_schema({"type": "object"}, schema)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({k: v for k, v in BODY.items() if k != "plan"}, '"plan" is a required property'),
        ({**BODY, "amount_cents": "19900"}, "amount_cents"),
        ({**BODY, "currency": "USD"}, "currency"),
        ({**BODY, "amount_cents": 0}, "amount_cents"),
    ],
)
def test_a_body_the_schema_rejects_names_the_field(body, fragment):
    with pytest.raises(PlannerResponseError, match="does not match the request schema") as caught:
        check_request(body, SCHEMA, raw=None)
    assert fragment in str(caught.value)


def test_many_violations_are_summarised():
    with pytest.raises(PlannerResponseError, match=r"and \d+ more"):
        check_request({"unexpected": True}, SCHEMA, raw=None)


def test_a_json_value_that_is_not_an_object_is_refused():
    with pytest.raises(PlannerResponseError, match="JSON list, not an object"):
        check_request([BODY], SCHEMA, raw=None)
