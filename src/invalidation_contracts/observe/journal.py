"""Recent change sets with their row diffs, kept by a provider for its operators (sans-IO).

A registry listener hands each move of the served state (``before``, ``after``) to
``ChangeJournal.record``; the journal keeps the last ``capacity`` change sets, each with the
tables it moved, their old and new versions, and up to ``max_rows`` row diffs per table (old and
new row values). The operator page and the client scoring read it; nothing here does I/O.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..server.state import RegistryState
from ..server.tables import diff, thaw

DEFAULT_CAPACITY = 200
"""Change sets the journal keeps."""
DEFAULT_MAX_ROWS = 50
"""Row diffs kept per table and change set (the count of every changed row is kept apart)."""


@dataclass(frozen=True, slots=True)
class RowDiff:
    """One row a change set added, removed or changed, with its values before and after."""

    key: str
    op: str
    old: Mapping[str, Any] | None
    new: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class TableMove:
    """One table a change set moved."""

    table: str
    old_version: str
    new_version: str
    rows: tuple[RowDiff, ...]
    changed_rows: int
    """Every row the change set touched in this table (``rows`` holds at most ``max_rows``)."""


@dataclass(frozen=True, slots=True)
class ChangeSet:
    """What one move of the served state did: its position, origin, time and tables."""

    epoch: str
    seq: int
    origin: str
    at: float
    tables: tuple[TableMove, ...]
    rules_changed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "seq": self.seq,
            "origin": self.origin,
            "at": self.at,
            "rules_changed": self.rules_changed,
            "tables": [
                {
                    "table": t.table,
                    "old_version": t.old_version,
                    "new_version": t.new_version,
                    "changed_rows": t.changed_rows,
                    "rows": [
                        {"key": r.key, "op": r.op, "old": r.old, "new": r.new} for r in t.rows
                    ],
                }
                for t in self.tables
            ],
        }


def moved_tables(before: RegistryState, after: RegistryState) -> list[str]:
    """The tables whose snapshot moved between two states (new ones included)."""
    return [
        name
        for name, snapshot in after.tables.items()
        if before.tables.get(name) is not snapshot
        and (name not in before.tables or before.tables[name].version != snapshot.version)
    ]


def change_set(
    before: RegistryState,
    after: RegistryState,
    origin: str,
    *,
    keys: Mapping[str, Iterable[str]] | None = None,
    max_rows: int = DEFAULT_MAX_ROWS,
    at: float | None = None,
) -> ChangeSet:
    """The change set between two states. ``keys``: per table, the row keys that may have moved
    (from the change log; a full comparison of the table otherwise)."""
    moves: list[TableMove] = []
    for name in moved_tables(before, after):
        new = after.tables[name]
        old = before.tables.get(name)
        if old is None:
            moves.append(TableMove(name, "", new.version, (), len(new)))
            continue
        wanted = None if keys is None or name not in keys else keys[name]
        delta = diff(old, new, wanted)
        rows: list[RowDiff] = []
        for op, found in (("added", delta.added), ("removed", delta.removed)):
            for key in found[:max_rows]:
                rows.append(_row(key, op, old.rows, new.rows))
        for key in delta.changed[: max(0, max_rows - len(rows))]:
            rows.append(_row(key, "changed", old.rows, new.rows))
        total = len(delta.added) + len(delta.removed) + len(delta.changed)
        moves.append(TableMove(name, old.version, new.version, tuple(rows[:max_rows]), total))
    return ChangeSet(
        epoch=after.epoch,
        seq=after.seq,
        origin=origin,
        at=time.time() if at is None else at,
        tables=tuple(moves),
        rules_changed=after.rules_changed_at > before.seq and after.epoch == before.epoch,
    )


def _row(key: str, op: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> RowDiff:
    before = old.get(key)
    after = new.get(key)
    return RowDiff(
        key,
        op,
        thaw(before) if before is not None else None,
        thaw(after) if after is not None else None,
    )


@dataclass
class ChangeJournal:
    """The last ``capacity`` change sets, newest last; safe to read from any thread."""

    capacity: int = DEFAULT_CAPACITY
    max_rows: int = DEFAULT_MAX_ROWS
    _sets: deque[ChangeSet] = field(init=False)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.capacity < 1 or self.max_rows < 0:
            raise ValueError("a journal keeps at least one change set and no negative row count")
        self._sets = deque(maxlen=self.capacity)

    def add(self, change: ChangeSet) -> None:
        with self._lock:
            self._sets.append(change)

    def recent(self, limit: int | None = None) -> list[ChangeSet]:
        """The newest ``limit`` change sets (all kept when None), newest first."""
        with self._lock:
            items = list(self._sets)
        items.reverse()
        return items if limit is None else items[: max(0, limit)]

    def after(self, epoch: str, seq: int) -> list[ChangeSet]:
        """The change sets of ``epoch`` after ``seq``, oldest first."""
        with self._lock:
            return [c for c in self._sets if c.epoch == epoch and c.seq > seq]
