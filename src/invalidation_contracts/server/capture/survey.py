"""A reconciliation's survey (sans-IO): which rows of a large table may differ from the registry.

The periodic reconciliation of a large table does not read it under the registry's write lock.
A *survey* runs beside the worker, outside the lock and outside the follower's stall bound: it
reads each table whose digest is not the one verified at the registry's version, in chunks, and
compares every row with the registry's table as it stood when the survey began. A row that
differs, or a key only one side holds, is a *candidate*. The rows a capture record touched while
the survey ran are candidates too (they differ), so the survey never decides: the worker then
reads just the candidates again under the lock, in the snapshot its consumption reads, and turns
what still differs into an ordinary change set labelled ``reconciled`` (``recheck``).

A table the survey found equal, row for row, to the registry's version is recorded as verified at
that version with the digest of the same snapshot: that digest is the registry's content there.

Two code versions may declare different columns of one table (a rolling or canary deploy that adds
one): a worker compares and writes only the columns it declares and keeps the registry row's values
of the table's other columns (``with_undeclared``), so two versions never rewrite each other's rows
back and forth. A column dropped from the table is not kept: its values leave at the next
reconciliation.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...protocol.problems import ProtocolError
from ..tables import Snapshot, freeze, same_json, thaw
from ..transitions import TableChange

if TYPE_CHECKING:
    from .records import QuarantineEntry


def with_undeclared(row: object, held: object, kept: Collection[str]) -> object:
    """``row`` as this worker read it (every column it declares, NULL included), with the values
    ``held`` (the registry's row) has in columns ``kept``: the table's columns this worker does
    not declare, which another version may (it wrote them; they are its to change)."""
    if not kept or not isinstance(row, Mapping) or not isinstance(held, Mapping):
        return row
    extra = {c: thaw(v) for c, v in held.items() if c in kept and c not in row}
    return {**row, **extra} if extra else row


@dataclass
class TableSurvey:
    """One table's comparison, fed the database's rows (key text → plain row) chunk by chunk;
    ``kept``: its columns this worker does not declare (``with_undeclared``)."""

    current: Snapshot
    kept: frozenset[str] = frozenset()
    differing: set[str] = field(default_factory=set)
    seen: set[str] = field(default_factory=set)
    unreadable: int = 0
    aside: list[tuple[str, str]] = field(default_factory=list)
    """The rows it cannot carry: (key, why), for the quarantine."""
    present: int = 0
    """How many of the registry's keys were seen: all of them, and no key is the registry's
    alone (``candidates`` then need not look for one)."""

    def feed(self, rows: Iterable[tuple[str, Any]]) -> None:
        current = self.current.rows
        for key, value in rows:
            held = current.get(key)
            self._see(key, held is not None)
            try:
                where = f"{self.current.name}[{key!r}]"
                frozen = freeze(with_undeclared(value, held, self.kept), where)
            except ProtocolError as exc:  # not compared: set aside (quarantined) by the caller
                self.unreadable += 1
                self.aside.append((key, exc.detail))
                continue
            if held is None or not same_json(frozen, held):
                self.differing.add(key)

    def unreadable_key(self, key: str) -> None:
        """A row whose value cannot be carried: it is neither compared nor missing."""
        self._see(key, key in self.current.rows)
        self.unreadable += 1

    def _see(self, key: str, held: bool) -> None:
        if key not in self.seen:
            self.seen.add(key)
            self.present += held

    def candidates(self) -> frozenset[str]:
        """Keys to read again under the lock: rows that differ, and keys only the registry holds
        (deleted around the capture, or since)."""
        rows = self.current.rows
        if self.present == len(rows):
            return frozenset(self.differing)
        # A loop of bytecode, not one C call: over a 1M-row table ``set(rows) - seen`` holds the
        # GIL for ~0.2 s, a stall the follower thread beside the survey cannot confirm through.
        return frozenset(self.differing.union(key for key in rows if key not in self.seen))

    @property
    def equal(self) -> bool:
        """The registry's table is the database's, row for row (nothing unreadable)."""
        return not self.unreadable and not self.candidates()


@dataclass(frozen=True)
class Survey:
    """What a survey found: per table the candidate keys (only tables with some), and the tables
    found equal to the registry (table → (digest, mark)) to record as verified."""

    candidates: Mapping[str, frozenset[str]]
    verified: Mapping[str, tuple[str, str]]
    read: int = 0
    """Rows read (for the log and the benchmark)."""
    unreadable: tuple[QuarantineEntry, ...] = ()
    """Rows the contract cannot carry (a write that bypassed the capture): to quarantine."""


@dataclass
class Recheck:
    """A survey's candidates waiting to be read again under the lock; ``done`` once they were."""

    candidates: Mapping[str, frozenset[str]]
    done: bool = False


def recheck(
    tables: Mapping[str, Snapshot],
    candidates: Mapping[str, frozenset[str]],
    rows: Mapping[str, Mapping[str, Any]],
    unreadable: Iterable[tuple[str, str]] = (),
    undeclared: Mapping[str, Collection[str]] | None = None,
) -> dict[str, TableChange]:
    """The reconciled change of each table: ``rows`` (the candidates read again under the lock,
    key → row; a candidate absent from them is absent from the database) against ``tables``.
    ``unreadable`` (table, key): rows the contract cannot carry, left to the quarantine;
    ``undeclared``: per table, the columns kept (``with_undeclared``)."""
    changes: dict[str, TableChange] = {}
    aside = set(unreadable)
    for name, every in candidates.items():
        current = tables.get(name)
        if current is None:
            continue
        keys = {key for key in every if (name, key) not in aside}
        kept = (undeclared or {}).get(name, ())
        found = {
            key: with_undeclared(row, current.rows.get(key), kept)
            for key, row in rows.get(name, {}).items()
        }
        upsert = {
            key: found[key] for key in keys if key in found and not current.holds({key: found[key]})
        }
        delete = frozenset(key for key in keys if key not in found and key in current.rows)
        if upsert or delete:
            changes[name] = TableChange(upsert, delete, reconciled=True)
    return changes
