"""Drift snapshots made from τ²'s own data at run time: the shipped rows with the changes a live
airline sees between two conversations (other users' bookings taking seats, a balance spent, a
flight cancelled, a fare moved, another user's reservation cancelled by τ²'s own tool).

A snapshot is a whole table, as the harness reloads it; one that builds on another lists its edits
after the other's (``+`` in the name), so a stream that reloads both in turn moves forward. The
files are written once per τ² version to a cache directory, never into this repository.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .source import Rows, date_key, initial_tables, tau2_version
from .view import airline_tools

Edit = Callable[[dict[str, Rows]], None]


@dataclass(frozen=True, slots=True)
class Spend:
    """``user_id`` spends from a stored-value payment method: its balance becomes ``left``."""

    user_id: str
    payment_id: str
    left: float

    def __call__(self, tables: dict[str, Rows]) -> None:
        tables["users"][self.user_id]["payment_methods"][self.payment_id]["amount"] = self.left


@dataclass(frozen=True, slots=True)
class TakeSeats:
    """Other users' bookings leave ``left`` seats in ``cabin`` of a flight on a date."""

    flight_number: str
    date: str
    cabin: str
    left: int

    def __call__(self, tables: dict[str, Rows]) -> None:
        row = tables["flight_dates"][date_key(self.flight_number, self.date)]
        row["available_seats"][self.cabin] = self.left


@dataclass(frozen=True, slots=True)
class Reprice:
    """The fare of ``cabin`` on a flight and date moves to ``price``."""

    flight_number: str
    date: str
    cabin: str
    price: int

    def __call__(self, tables: dict[str, Rows]) -> None:
        row = tables["flight_dates"][date_key(self.flight_number, self.date)]
        row["prices"][self.cabin] = self.price


@dataclass(frozen=True, slots=True)
class Cancel:
    """A flight on a date is cancelled (τ²'s ``FlightDateStatusCancelled``)."""

    flight_number: str
    date: str

    def __call__(self, tables: dict[str, Rows]) -> None:
        key = date_key(self.flight_number, self.date)
        tables["flight_dates"][key] = {
            "flight_number": self.flight_number,
            "date": self.date,
            "status": "cancelled",
        }


@dataclass(frozen=True, slots=True)
class CancelReservation:
    """Another user cancels a reservation, through τ²'s own ``cancel_reservation``."""

    reservation_id: str

    def __call__(self, tables: dict[str, Rows]) -> None:
        done = airline_tools(tables).cancel_reservation(self.reservation_id)
        tables["reservations"][self.reservation_id] = done.model_dump(mode="json")


@dataclass(frozen=True, slots=True)
class DriftSnapshot:
    """One drift snapshot: ``table`` after ``edits``, applied to τ²'s shipped rows in order."""

    table: str
    edits: tuple[Edit, ...]


#: The drift snapshots, by name (``<table>.<what happened>``).
SNAPSHOTS: dict[str, DriftSnapshot] = {
    "users.gift-card-spent": DriftSnapshot(
        "users",
        (
            Spend("omar_rossi_1241", "gift_card_8190333", 15.0),
            Spend("mohamed_silva_9265", "gift_card_8020792", 48.0),
        ),
    ),
    "reservations.other-cancelled": DriftSnapshot("reservations", (CancelReservation("EHGLP3"),)),
    "flight_dates.seats-taken": DriftSnapshot(
        "flight_dates",
        (
            TakeSeats("HAT232", "2024-05-21", "economy", 2),
            TakeSeats("HAT001", "2024-05-21", "economy", 2),
        ),
    ),
    "flight_dates.seats-taken+cancelled": DriftSnapshot(
        "flight_dates",
        (
            TakeSeats("HAT232", "2024-05-21", "economy", 2),
            TakeSeats("HAT001", "2024-05-21", "economy", 2),
            Cancel("HAT208", "2024-05-27"),
        ),
    ),
    "flight_dates.fares-moved": DriftSnapshot(
        "flight_dates",
        (
            Reprice("HAT001", "2024-05-21", "economy", 131),
            Reprice("HAT001", "2024-05-22", "business", 402),
        ),
    ),
}


def snapshot_rows(snapshot: DriftSnapshot) -> Rows:
    """The table ``snapshot`` describes: τ²'s rows with its edits applied (only edited rows are
    copied; the rest are shared with the loaded database)."""
    tables: dict[str, Rows] = {name: _Copying(rows) for name, rows in initial_tables().items()}
    for edit in snapshot.edits:
        edit(tables)
    return dict(tables[snapshot.table])


class _Copying(dict[str, Any]):
    """A table whose rows are deep-copied on first access, so an edit never reaches the shared
    rows of the loaded database."""

    def __init__(self, rows: Mapping[str, Any]) -> None:
        super().__init__(rows)
        self._copied: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        if key not in self._copied:
            super().__setitem__(key, json.loads(json.dumps(super().__getitem__(key))))
            self._copied.add(key)
        return super().__getitem__(key)


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/invalidation-contracts/tau2-airline`` (``~/.cache`` without it)."""
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "invalidation-contracts" / "tau2-airline"


def _digest() -> str:
    return hashlib.sha256(repr(sorted(SNAPSHOTS.items())).encode()).hexdigest()[:12]


def snapshot_files(root: Path | None = None) -> dict[str, Path]:
    """Every snapshot as a table file (written on first use), by name."""
    directory = (root or cache_root()) / f"{tau2_version()}-{_digest()}"
    paths = {name: directory / f"{name}.json" for name in SNAPSHOTS}
    missing = [name for name, path in paths.items() if not path.is_file()]
    if missing:
        directory.mkdir(parents=True, exist_ok=True)
    for name in missing:
        snapshot = SNAPSHOTS[name]
        body = {"table": snapshot.table, "rows": snapshot_rows(snapshot)}
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(body, out, separators=(",", ":"))
        os.replace(tmp, paths[name])
    return paths


__all__ = [
    "SNAPSHOTS",
    "Cancel",
    "CancelReservation",
    "Reprice",
    "DriftSnapshot",
    "Spend",
    "TakeSeats",
    "cache_root",
    "snapshot_files",
    "snapshot_rows",
]
