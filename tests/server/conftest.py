import pytest
from pydantic import BaseModel

from invalidation_contracts.protocol import Action
from invalidation_contracts.server import Domain, Route, Rule, TableSpec, Violation, policy


class Subscription(BaseModel):
    plan: str
    payment_method_token: str
    amount_cents: int = 100
    promo_code: str | None = None


@policy("required_promo_policy")
def required_promo(request, tables):
    row = tables["active_csm_codes"].get(request["plan"])
    if row is not None and request.get("promo_code") != row["code"]:
        return Violation(
            "ADD_REQUIRED_PROMO_CODE",
            "this plan needs its CSM promo code",
            {"promo_code": row["code"]},
            Action.ADD_FIELD,
            scope={"plan": request["plan"]},
        )


@policy("funding_type_policy")
def funding(request, tables):
    if (
        tables["token_funding_map"].get(request["payment_method_token"], {}).get("funding")
        == "debit"
    ):
        replacement = tables["recommended_credit_token"]["default"]["token"]
        return Violation(
            "USE_REQUIRED_FUNDING_TYPE",
            "this plan requires credit",
            {"payment_method_token": replacement},
            Action.CONDITIONAL_REWRITE,
            precondition={"payment_method_token": request["payment_method_token"]},
            scope={"payment_method_token": request["payment_method_token"]},
        )


@policy("amount_rounding")
def rounding(request, tables):
    if request["amount_cents"] % 100:
        return Violation(
            "ROUND_AMOUNT",
            "amounts are whole units",
            {"amount_cents": request["amount_cents"] // 100 * 100},
            Action.REWRITE_VALUE,
        )


@pytest.fixture
def domain():
    return Domain(
        "test",
        {
            "active_csm_codes": TableSpec({"growth": {"code": "S25"}, "team": {"code": "T10"}}),
            "promo_eligibility": TableSpec({"S25": {}, "T10": {}}),
            "token_funding_map": TableSpec(
                {"tok_debit": {"funding": "debit"}, "tok_credit": {"funding": "credit"}}
            ),
            "recommended_credit_token": TableSpec({"default": {"token": "tok_credit"}}),
        },
        [Rule("active_csm_codes", "promo_eligibility", "requires_recognition", via="code")],
        [
            Route(
                "/v1/subscriptions",
                Subscription,
                [required_promo, funding, rounding],
                patchable=frozenset({"promo_code", "payment_method_token", "amount_cents"}),
            )
        ],
    )
