"""Each of τ²'s precondition errors becomes the suggestion τ²'s own tool then accepts, and its
dependency keys are exactly the rows τ²'s code read (recorded by the tracked views)."""

from __future__ import annotations

import pytest

from invalidation_contracts.domains.tau2_airline.policies import (
    REFUSED,
    USE_ACCEPTED_PAYMENT,
    USE_AVAILABLE_FLIGHT,
    USE_CABIN_WITH_SEATS,
)
from invalidation_contracts.server import TableChange

pytestmark = pytest.mark.tau2


def only_finding(airline, provider, family_id, **changes):
    family = airline.family(family_id)
    request = {**family.draft(), **changes}
    (finding,) = provider.findings(airline.route_of(family), request)
    return finding, request


def passes(airline, provider, family_id, request):
    route = airline.route_of(family_id)
    return provider.handle(route, request).status == 200


def test_a_certificate_becomes_the_users_first_gift_card_that_pays(airline, provider):
    finding, request = only_finding(airline, provider, "payment-fq8ape")
    fix = finding.violation
    assert fix.type == USE_ACCEPTED_PAYMENT and finding.cacheable
    assert fix.message.startswith("Certificate cannot be used to update reservation")
    assert dict(fix.parameters) == {"payment_id": "gift_card_8190333"}
    assert dict(fix.precondition) == {"payment_id": "certificate_1778167"}
    assert finding.reads == {
        "reservations": frozenset({"FQ8APE"}),
        "users": frozenset({"omar_rossi_1241"}),
        "flights": frozenset({"HAT056", "HAT138"}),
        "flight_dates": frozenset({"HAT056@2024-05-25", "HAT138@2024-05-25"}),
    }
    assert passes(airline, provider, "payment-fq8ape", {**request, **fix.parameters})


def test_a_gift_card_without_balance_becomes_one_with_enough(airline, provider):
    finding, _ = only_finding(airline, provider, "payment-obut9v")
    assert finding.violation.type == USE_ACCEPTED_PAYMENT
    assert finding.violation.message.startswith("Gift card balance is not enough")
    assert dict(finding.violation.parameters) == {"payment_id": "gift_card_6276644"}
    assert finding.reads["users"] == frozenset({"sofia_kim_7287"})


def test_a_payment_method_not_found_becomes_one_the_user_holds(airline, provider):
    finding, _ = only_finding(airline, provider, "payment-yax4dr-bags", payment_id="paypal_1")
    assert finding.violation.type == USE_ACCEPTED_PAYMENT
    assert finding.violation.message.startswith("Payment method not found")
    assert dict(finding.violation.parameters) == {"payment_id": "credit_card_4938634"}
    assert finding.reads == {
        "reservations": frozenset({"YAX4DR"}),
        "users": frozenset({"chen_lee_6825"}),
    }


def test_not_enough_seats_becomes_the_first_cabin_tau2_accepts(airline, provider):
    finding, request = only_finding(airline, provider, "seats-owz4xl")
    fix = finding.violation
    assert fix.type == USE_CABIN_WITH_SEATS and fix.table == "flight_dates"
    assert fix.message.startswith("Not enough seats on flight HAT202")
    assert dict(fix.parameters) == {"cabin": "economy"}
    assert finding.reads["flight_dates"] == frozenset({"HAT202@2024-05-21", "HAT232@2024-05-21"})
    assert passes(airline, provider, "seats-owz4xl", {**request, **fix.parameters})


def test_a_cancelled_flight_becomes_a_direct_flight_on_the_same_route_and_date(
    airline, provider, registry
):
    cancelled = {"flight_number": "HAT232", "date": "2024-05-21", "status": "cancelled"}
    registry.apply({"flight_dates": TableChange.patch({"HAT232@2024-05-21": cancelled})})
    family = airline.family("seats-owz4xl")
    request = {**family.draft(), "cabin": "economy"}
    (finding,) = provider.findings(airline.route_of(family), request, registry.state)
    fix = finding.violation
    assert fix.type == USE_AVAILABLE_FLIGHT
    assert fix.message.startswith("Flight HAT232 not available on date 2024-05-21")
    (first, second) = fix.parameters["flights"]
    assert first == {"flight_number": "HAT202", "date": "2024-05-21"}
    assert second["date"] == "2024-05-21" and second["flight_number"] != "HAT232"
    route = registry.state.tables["flights"].rows["HAT232"]
    alternative = registry.state.tables["flights"].rows[second["flight_number"]]
    assert (alternative["origin"], alternative["destination"]) == (
        route["origin"],
        route["destination"],
    )
    # τ²'s search scans every flight (None: the whole table, the static schedule) and reads the
    # flight_dates row of each flight on that route and date, and no other date
    assert finding.reads["flights"] is None
    assert "HAT232@2024-05-21" in finding.reads["flight_dates"]
    assert all(k.endswith("@2024-05-21") for k in finding.reads["flight_dates"])
    fixed = {**request, **fix.parameters}
    assert provider.handle(airline.route_of(family), fixed).status == 200


def test_an_error_no_recovery_knows_is_a_refusal_the_client_must_not_cache(airline, provider):
    finding, _ = only_finding(airline, provider, "payment-fq8ape", reservation_id="NOPE00")
    assert finding.violation.type == REFUSED and finding.violation.no_store
    assert finding.violation.message == "Reservation NOPE00 not found"
    assert not finding.cacheable


def test_a_request_tau2_accepts_answers_tau2s_own_result(airline, provider):
    family = airline.family("plain-xehm4b")
    outcome = provider.handle(airline.route_of(family), family.draft())
    assert outcome.status == 200
    result = outcome.body.to_wire()["result"]
    assert result["reservation_id"] == "XEHM4B"
    assert [leg["flight_number"] for leg in result["flights"]] == ["HAT005", "HAT178"]


def test_serving_a_request_changes_no_reference_row(airline, provider, registry):
    before = registry.state.tables["users"].etags
    family = airline.family("payment-obut9v")
    request = {**family.draft(), "payment_id": "gift_card_6276644"}
    assert provider.handle(airline.route_of(family), request).status == 200
    assert registry.state.tables["users"].etags == before and registry.state.seq == 0
