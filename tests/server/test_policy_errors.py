"""A policy that breaks the policy API is a provider bug: a ``PolicyError`` naming the policy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from pydantic import BaseModel

from invalidation_contracts.protocol import Action
from invalidation_contracts.server import (
    Domain,
    PolicyError,
    Provider,
    Route,
    TableSpec,
    TrackedTables,
    Violation,
    policy,
)


class Order(BaseModel):
    plan: str
    promo_code: str | None = None


def provider_with(check: Any) -> tuple[Provider, Route]:
    route = Route("/v1/orders", Order, [check])
    domain = Domain("shop", {"plans": TableSpec({"basic": {"promo": "P1"}})}, [], [route])
    return Provider(domain), route


def test_reading_a_table_the_registry_does_not_hold_names_the_policy_and_the_table():
    @policy("promo_policy")
    def misspelt(request: Mapping[str, Any], tables: TrackedTables) -> None:
        tables["plnas"].get(request["plan"])

    provider, route = provider_with(misspelt)
    with pytest.raises(PolicyError) as caught:
        provider.handle(route, {"plan": "basic"})

    assert (caught.value.policy, caught.value.table) == ("promo_policy", "plnas")
    assert str(caught.value) == (
        "policy 'promo_policy' reads table 'plnas', which the registry does not hold "
        "(tables: plans)"
    )


def test_a_misspelt_table_is_not_a_key_error_a_policy_could_swallow():
    assert not issubclass(PolicyError, LookupError)


@pytest.mark.parametrize(
    "returned",
    [{"type": "FIX"}, "FIX", [Violation("FIX", "m", {"promo_code": "P1"}, Action.ADD_FIELD), 3]],
    ids=["dict", "str", "list-with-a-non-violation"],
)
def test_a_check_returning_something_other_than_violations_is_a_policy_error(returned):
    @policy("promo_policy")
    def wrong(request: Mapping[str, Any], tables: TrackedTables) -> Any:
        return returned

    provider, route = provider_with(wrong)
    with pytest.raises(PolicyError, match="policy 'promo_policy' returned"):
        provider.handle(route, {"plan": "basic"})


def test_a_parameter_that_is_not_a_request_field_is_a_policy_error():
    @policy("promo_policy")
    def stray(request: Mapping[str, Any], tables: TrackedTables) -> Violation:
        promo = tables["plans"]["basic"]["promo"]
        return Violation("ADD_PROMO", "m", {"promo": promo}, Action.ADD_FIELD)

    provider, route = provider_with(stray)
    with pytest.raises(PolicyError) as caught:
        provider.handle(route, {"plan": "basic"})

    assert caught.value.field == "promo"
    assert "parameter 'promo', which is not a field of the request" in str(caught.value)


def test_a_precondition_on_a_field_the_request_lacks_is_a_policy_error():
    @policy("promo_policy")
    def stray(request: Mapping[str, Any], tables: TrackedTables) -> Violation:
        return Violation(
            "DROP_PROMO",
            "m",
            {"promo_code": None},
            Action.CONDITIONAL_REWRITE,
            precondition={"coupon": "X"},
        )

    provider, route = provider_with(stray)
    with pytest.raises(PolicyError, match="precondition 'coupon'"):
        provider.handle(route, {"plan": "basic"})


def test_a_fix_naming_request_fields_passes():
    @policy("promo_policy")
    def good(request: Mapping[str, Any], tables: TrackedTables) -> Violation:
        promo = tables["plans"]["basic"]["promo"]
        return Violation("ADD_PROMO", "m", {"promo_code": promo}, Action.ADD_FIELD)

    provider, route = provider_with(good)
    assert provider.handle(route, {"plan": "basic"}).status == 422


def test_an_origin_wide_fix_with_a_scope_names_the_policy_the_fix_and_the_field():
    @policy("region_policy")
    def wide_but_scoped(request: Mapping[str, Any], tables: TrackedTables) -> Violation:
        tables["plans"].get("basic")
        return Violation(
            "USE_REGION",
            "m",
            {"promo_code": "P1"},
            Action.ADD_FIELD,
            scope={"plan": request["plan"]},
            origin_wide=True,
        )

    provider, route = provider_with(wide_but_scoped)
    with pytest.raises(PolicyError) as caught:
        provider.handle(route, {"plan": "basic"})

    assert (caught.value.policy, caught.value.field) == ("region_policy", "plan")
    assert "USE_REGION origin-wide with scope {'plan': 'basic'}" in str(caught.value)
