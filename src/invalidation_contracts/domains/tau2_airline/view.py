"""τ²'s own ``AirlineTools`` run over reference tables: a ``FlightDB`` look-alike whose collections
read rows through the table views they are given.

Handed a policy's tracked views, every row τ²'s code looks up (an absent one too), every key set it
iterates, is recorded as the fix's dependency, by construction. Rows are handed out as fresh τ²
models, so what a tool writes (seats taken, a gift card debited, a reservation added) stays in
this one view and never reaches the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from invalidation_contracts.server import thaw

from .source import date_key, require_tau2

Table = Mapping[str, Any]


class _Collection:
    """One τ² collection over a table: rows become τ² models on first read, writes stay here."""

    def __init__(self, table: Table, model: Callable[[str, dict[str, Any]], Any]) -> None:
        self._table = table
        self._model = model
        self._made: dict[str, Any] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._made or key in self._table

    def __getitem__(self, key: str) -> Any:
        if key not in self._made:
            self._made[key] = self._model(key, thaw(self._table[key]))
        return self._made[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._made[key] = value

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self else default

    def __iter__(self) -> Iterator[str]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def keys(self) -> Iterator[str]:
        return iter(self)

    def values(self) -> Iterator[Any]:
        return (self[key] for key in self)

    def items(self) -> Iterator[tuple[str, Any]]:
        return ((key, self[key]) for key in self)


class _Dates:
    """A flight's ``dates`` mapping, read one ``flight_dates`` row at a time."""

    def __init__(self, table: Table, flight_number: str, status: Callable[[Any], Any]) -> None:
        self._table = table
        self._number = flight_number
        self._status = status
        self._made: dict[str, Any] = {}

    def __contains__(self, date: object) -> bool:
        return isinstance(date, str) and date_key(self._number, date) in self._table

    def __getitem__(self, date: str) -> Any:
        if date not in self._made:
            self._made[date] = self._status(thaw(self._table[date_key(self._number, date)]))
        return self._made[date]

    def get(self, date: str, default: Any = None) -> Any:
        return self[date] if date in self else default

    def __iter__(self) -> Iterator[str]:
        prefix = date_key(self._number, "")
        return (key[len(prefix) :] for key in self._table if key.startswith(prefix))


class AirlineView:
    """What ``AirlineTools`` takes as its ``db``: ``users``, ``reservations`` and ``flights``
    over the four reference tables (``tables[name]`` is any mapping of rows: a policy's tracked
    view, or a registry state's rows)."""

    def __init__(self, tables: Mapping[str, Table] | Any) -> None:
        require_tau2()
        from pydantic import TypeAdapter
        from tau2.domains.airline.data_model import Flight, FlightDateStatus, Reservation, User

        status = TypeAdapter(FlightDateStatus).validate_python
        dates = tables["flight_dates"]

        def flight(number: str, row: dict[str, Any]) -> Any:
            return Flight.model_construct(**row, dates=_Dates(dates, number, status))

        self.users = _Collection(tables["users"], lambda _k, row: User.model_validate(row))
        self.reservations = _Collection(
            tables["reservations"], lambda _k, row: Reservation.model_validate(row)
        )
        self.flights = _Collection(tables["flights"], flight)


def airline_tools(tables: Mapping[str, Table] | Any) -> Any:
    """τ²'s ``AirlineTools`` over ``tables`` (see ``AirlineView``)."""
    require_tau2()
    from tau2.domains.airline.tools import AirlineTools

    return AirlineTools(AirlineView(tables))


__all__ = ["AirlineView", "airline_tools"]
