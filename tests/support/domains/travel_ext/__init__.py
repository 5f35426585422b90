"""A travel-booking API with two routes, driven through the harness by tests/bench/test_routes.py.

Booking a trip (``POST /v1/bookings``) and registering a card (``POST /v1/cards``) each run the
service's own validation code as it is (``wrapped_policy``); ``tasks.toml`` names the route of
each task family that does not use the default one, and gives each route a paragraph of system
prompt. The domain is built only on the library's public API, as a third-party domain would be.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from invalidation_contracts.domains.catalog import DomainCatalog, load_rules, load_tables
from invalidation_contracts.protocol import Action
from invalidation_contracts.server import Domain, ErrorRule, Route, wrapped_policy

HERE = Path(__file__).parent

# --- the service's own code, unchanged --------------------------------------------------------


class TravelError(Exception):
    """What the service raises when a request is invalid."""


def check_booking(
    request: dict[str, Any], cards: Mapping[str, Any], travellers: Mapping[str, Any]
) -> None:
    if request["card"] not in cards:
        registered = ", ".join(sorted(cards))
        raise TravelError(f"card not registered; registered cards: {registered}")
    expected = travellers[request["booking_ref"]]
    if request["traveller"] != f"{expected['first']} {expected['last']}":
        raise TravelError(f"expected traveller {expected['first']} {expected['last']}")


def check_card(request: dict[str, Any], holders: Mapping[str, Any]) -> None:
    holder = holders.get(request["holder"])
    if holder is None:
        raise TravelError(f"unknown holder {request['holder']}")
    if request["currency"] != holder["currency"]:
        raise TravelError(f"cards of holder {request['holder']} are billed in {holder['currency']}")


# --- the provider: two routes over tracked tables ---------------------------------------------


class Booking(BaseModel):
    booking_ref: str
    traveller: str
    card: str
    amount: int


class CardRegistration(BaseModel):
    holder: str
    card: str
    currency: str


BOOKING_ERRORS = [
    ErrorRule(
        r"registered cards: (?P<cards>.+)$",
        "USE_REGISTERED_CARD",
        Action.REWRITE_VALUE,
        {"card": "{cards[0]}"},
        scope=["card"],
    ),
    ErrorRule(
        r"expected traveller (?P<first>\S+) (?P<last>\S+)",
        "USE_BOOKED_TRAVELLER",
        Action.REWRITE_VALUE,
        {"traveller": "{first} {last}"},
        scope=["booking_ref"],
    ),
]

CARD_ERRORS = [
    ErrorRule(
        r"billed in (?P<currency>[A-Z]{3})$",
        "USE_HOLDER_CURRENCY",
        Action.REWRITE_VALUE,
        {"currency": "{currency}"},
        scope=["holder"],
    ),
]


def build_domain() -> Domain:
    bookings = wrapped_policy(
        "booking_validator",
        check_booking,
        tables={"cards": "cards", "travellers": "travellers"},
        errors=BOOKING_ERRORS,
        raises=(TravelError,),
        unmatched="BOOKING_REFUSED",
    )
    cards = wrapped_policy(
        "card_validator",
        check_card,
        tables={"holders": "holders"},
        errors=CARD_ERRORS,
        raises=(TravelError,),
        unmatched="CARD_REFUSED",
    )
    return Domain(
        "travel",
        load_tables(HERE / "data"),
        load_rules(HERE / "rules" / "initial.json"),
        [Route("/v1/bookings", Booking, [bookings]), Route("/v1/cards", CardRegistration, [cards])],
    )


def catalog() -> DomainCatalog:
    """The harness catalog: ``/v1/bookings`` by default, ``/v1/cards`` where a family names it."""
    return DomainCatalog.from_directory(build_domain(), HERE, "/v1/bookings")
