"""Existing validation code, wrapped as it is: a travel-booking service's own validator.

Needs no extra: the provider's core installs with ``pip install .``.

``BookingValidator`` below is written the way a service written elsewhere is: it holds its state
as plain mappings, raises ``BookingError`` with the fix in the message, and debits the card it
checked. It is not changed. ``wrapped_policy`` hands it tracked views of the reference tables, so
what it reads becomes each fix's dependency vector — the key set of ``cards`` when it lists the
registered cards (a membership dependency), one traveller's row when it names the traveller —
and a small table of ``ErrorRule`` patterns maps its messages to suggestions. Its debit runs on a
throwaway copy (``copy_on_write=True``); without that option the write is refused with a
``PolicyError`` naming the table and key.

Run it: ``python docs/examples/wrapped_validator.py``. It prints the two fixes, then shows, with a
row-level client memory, that a change to a card's balance leaves the "registered cards" fix in
memory while a new card evicts it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from invalidation_contracts.client import FetchChanges, FixMemory
from invalidation_contracts.client.values import Answer, Observed
from invalidation_contracts.protocol import Action, Problem
from invalidation_contracts.server import (
    Domain,
    ErrorRule,
    PolicyError,
    Provider,
    Route,
    TableSpec,
    wrapped_policy,
)

# --- the service's own code, unchanged --------------------------------------------------------


class BookingError(Exception):
    """What the service raises when a booking is invalid."""


class BookingValidator:
    def __init__(self, cards: Mapping[str, Any], travellers: Mapping[str, Any]) -> None:
        self.cards = cards
        self.travellers = travellers

    def validate(self, booking: dict[str, Any]) -> None:
        if booking["card"] not in self.cards:
            registered = ", ".join(sorted(self.cards))
            raise BookingError(f"card not registered; registered cards: {registered}")
        expected = self.travellers[booking["booking_ref"]]
        if booking["traveller"] != f"{expected['first']} {expected['last']}":
            raise BookingError(f"expected traveller {expected['first']} {expected['last']}")
        card = self.cards[booking["card"]]
        if card["balance"] < booking["amount"]:
            raise BookingError("insufficient funds")
        card["balance"] -= booking["amount"]  # the service reserves the amount as it checks


# --- the provider: the same code, over tracked tables -----------------------------------------


class Booking(BaseModel):
    booking_ref: str
    traveller: str
    card: str
    amount: int


def validate(
    request: dict[str, Any], cards: Mapping[str, Any], travellers: Mapping[str, Any]
) -> None:
    BookingValidator(cards, travellers).validate(request)


ERRORS = [
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


def domain(*, copy_on_write: bool = True) -> Domain:
    check = wrapped_policy(
        "booking_validator",
        validate,
        tables={"cards": "cards", "travellers": "travellers"},
        errors=ERRORS,
        raises=(BookingError,),
        unmatched="BOOKING_REFUSED",
        copy_on_write=copy_on_write,
    )
    return Domain(
        "travel",
        {
            "cards": TableSpec({"amex-1": {"balance": 900}, "visa-2": {"balance": 50}}),
            "travellers": TableSpec({"BK1": {"first": "Ada", "last": "Lovelace"}}),
        },
        [],
        [Route("/v1/bookings", Booking, [check])],
    )


ORIGIN = "https://travel.example"


def observe(memory: FixMemory, provider: Provider, body: dict[str, Any]) -> Problem | None:
    """Send ``body`` to the provider and feed the answer (and the diffs it asks for) to memory."""
    outcome = provider.handle(provider.domain.routes[0], body)
    needs = memory.observe(ORIGIN, Observed(body, outcome.status, outcome.body.to_wire())).needs
    while needs:
        feeds = [
            (n, provider.registry.changes(n.since, epoch=n.epoch))
            for n in needs
            if isinstance(n, FetchChanges)  # a row-level memory asks only for diffs
        ]
        needs = tuple(x for n, f in feeds for x in memory.answer(n, Answer.changes(f)).needs)
    return outcome.body if isinstance(outcome.body, Problem) else None


def main() -> None:
    travel = domain()
    provider = Provider(travel)
    memory = FixMemory("row")
    draft = {"booking_ref": "BK1", "traveller": "A. Lovelace", "card": "mc-9", "amount": 100}
    for body in (draft, {**draft, "card": "amex-1"}):
        problem = observe(memory, provider, body)
        assert problem is not None and problem.recovery_feedback is not None
        [fix] = [s.to_wire() for s in problem.recovery_feedback.suggestions]
        print(fix["type"], json.dumps({k: fix[k] for k in ("parameters", "tables")}))
    booked = {**draft, "card": "amex-1", "traveller": "Ada Lovelace"}
    print("with both fixes:", provider.handle(travel.routes[0], booked).status)
    print(
        "balance after the booking:", dict(provider.registry.state.tables["cards"].rows["amex-1"])
    )

    provider.registry.patch("cards", upsert={"visa-2": {"balance": 75}})
    observe(memory, provider, booked)
    print("after a balance change:", sorted(e.type for e in memory.entries(ORIGIN)))
    provider.registry.patch("cards", upsert={"mc-9": {"balance": 10}})
    observe(memory, provider, booked)
    print("after a new card:", sorted(e.type for e in memory.entries(ORIGIN)))

    strict = domain(copy_on_write=False)
    try:
        Provider(strict).handle(strict.routes[0], booked)
    except PolicyError as exc:
        print("without copy_on_write:", exc)


if __name__ == "__main__":
    main()
