"""Recovery suggestions made from τ²'s own precondition errors.

Each route's policy runs τ²'s tool on the request over the tracked tables. When the tool raises,
its message is matched against ``RECOVERIES``: the recovery lists the values one request field
could take instead (the user's own payment methods, the other cabins, the direct flights on the
same route and date), runs τ²'s tool again with each, and suggests the first it accepts. So the
fix is what τ² itself would accept, and its dependency vector is every row τ²'s code read for the
refusal and for the candidates (recorded by the tracked views, never written by hand). A message
no recovery matches, or a recovery no candidate passes, is a refusal the client must not cache.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from invalidation_contracts.protocol import Action
from invalidation_contracts.server import FunctionPolicy, TrackedTables, Violation

from .schema import CABINS
from .view import airline_tools

USE_ACCEPTED_PAYMENT = "USE_ACCEPTED_PAYMENT_METHOD"
USE_CABIN_WITH_SEATS = "USE_CABIN_WITH_SEATS"
USE_AVAILABLE_FLIGHT = "USE_AVAILABLE_FLIGHT"
REFUSED = "AIRLINE_REFUSED"

#: The order payment methods are offered in: stored value first, then a card; certificates last
#: (τ² refuses them for updates). Within a source, by id.
SOURCE_ORDER = {"gift_card": 0, "credit_card": 1, "certificate": 2}

Candidates = Callable[[Mapping[str, Any], TrackedTables, re.Match[str]], list[Any]]


def attempt(tool: str, request: Mapping[str, Any], tables: TrackedTables) -> str | None:
    """Run τ²'s ``tool`` on ``request`` over ``tables``: None when it accepts, else its message."""
    try:
        getattr(airline_tools(tables), tool)(**copy.deepcopy(dict(request)))
    except ValueError as exc:  # τ² raises ValueError (pydantic's ValidationError is one too)
        return str(exc)
    return None


def payment_methods(
    request: Mapping[str, Any], tables: TrackedTables, found: re.Match[str]
) -> list[Any]:
    """The payment methods stored on the reservation's user, in ``SOURCE_ORDER``."""
    reservation = tables["reservations"].get(request["reservation_id"])
    user = None if reservation is None else tables["users"].get(reservation["user_id"])
    if user is None:
        return []
    methods = user["payment_methods"]
    return sorted(methods, key=lambda pid: (SOURCE_ORDER.get(methods[pid]["source"], 9), pid))


def cabins(request: Mapping[str, Any], tables: TrackedTables, found: re.Match[str]) -> list[Any]:
    """The other cabins, in τ²'s order."""
    return [cabin for cabin in CABINS if cabin != request["cabin"]]


def direct_flights(
    request: Mapping[str, Any], tables: TrackedTables, found: re.Match[str]
) -> list[Any]:
    """The itinerary with the unavailable flight replaced by each direct flight τ²'s own search
    finds on the same route and date."""
    number, date = found.group("flight"), found.group("date")
    legs = [dict(leg) for leg in request["flights"]]
    at = next(
        (i for i, leg in enumerate(legs) if (leg["flight_number"], leg["date"]) == (number, date)),
        None,
    )
    flight = tables["flights"].get(number)
    if at is None or flight is None:
        return []
    tools = airline_tools(tables)
    found_flights = tools._search_direct_flight(
        date=date, origin=flight["origin"], destination=flight["destination"]
    )
    return [
        [*legs[:at], {"flight_number": f.flight_number, "date": date}, *legs[at + 1 :]]
        for f in found_flights
        if f.flight_number != number
    ]


@dataclass(frozen=True, slots=True)
class Recovery:
    """A τ² error message (``pattern``) and how to recover: try ``candidates`` for ``field``."""

    pattern: str
    type: str
    field: str
    candidates: Candidates
    table: str

    def match(self, message: str) -> re.Match[str] | None:
        return re.search(self.pattern, message)


RECOVERIES: tuple[Recovery, ...] = (
    Recovery(
        r"^Payment method not found$|^Gift card balance is not enough$"
        r"|^Certificate cannot be used to update reservation$",
        USE_ACCEPTED_PAYMENT,
        "payment_id",
        payment_methods,
        "users",
    ),
    Recovery(
        r"^Not enough seats on flight (?P<flight>\S+)$",
        USE_CABIN_WITH_SEATS,
        "cabin",
        cabins,
        "flight_dates",
    ),
    Recovery(
        r"^Flight (?P<flight>\S+) not available on date (?P<date>\S+)$",
        USE_AVAILABLE_FLIGHT,
        "flights",
        direct_flights,
        "flight_dates",
    ),
)


def recover(
    tool: str,
    request: Mapping[str, Any],
    tables: TrackedTables,
    message: str,
    recoveries: Sequence[Recovery] = RECOVERIES,
) -> Violation:
    """The suggestion for τ²'s refusal ``message`` of ``request``."""
    for recovery in recoveries:
        found = recovery.match(message)
        if found is None or recovery.field not in request:
            continue
        for value in recovery.candidates(request, tables, found):
            if value == request[recovery.field]:
                continue
            if attempt(tool, {**request, recovery.field: value}, tables) is None:
                return Violation(
                    recovery.type,
                    f"{message}; {tool} accepts {recovery.field} {value!r}",
                    {recovery.field: value},
                    Action.REWRITE_VALUE,
                    scope=dict(request),
                    precondition={recovery.field: request[recovery.field]},
                    table=recovery.table,
                )
        break
    return Violation(REFUSED, message, {}, Action.REWRITE_VALUE, scope=dict(request), no_store=True)


def tool_policy(tool: str) -> FunctionPolicy:
    """The policy of the route serving τ²'s ``tool``."""

    def check(request: Mapping[str, Any], tables: TrackedTables) -> Violation | None:
        message = attempt(tool, request, tables)
        return None if message is None else recover(tool, request, tables, message)

    check.__name__ = f"tau2_{tool}"
    return FunctionPolicy(f"tau2_{tool}", check)


__all__ = [
    "RECOVERIES",
    "REFUSED",
    "USE_ACCEPTED_PAYMENT",
    "USE_AVAILABLE_FLIGHT",
    "USE_CABIN_WITH_SEATS",
    "Recovery",
    "attempt",
    "recover",
    "tool_policy",
]
