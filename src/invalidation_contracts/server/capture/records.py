"""Captured row images and what they do to the registry (sans-IO): records, change sets, gaps,
quarantine entries, whatever source captured them.

The capture triggers write one record per written row: ``upsert`` with the row's new image,
``delete`` with the old key, or ``truncate`` for a whole table (PostgreSQL); a writer may add a
``version`` record (the admin routes do) to name the table's next version. Each record has an
id from a counter that only moves in committed transactions, so the ids a reader sees after a
position are contiguous; anything else is a gap no one can explain, and the registry starts a new
epoch rather than skip it. Records of one transaction (``tx``) form one change set; SQLite cannot
name its transactions, so there every record pending at a read is one change set (it never splits
a transaction, it may merge several).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ...protocol.canonical import canonical_json
from ...protocol.problems import ProblemType, ProtocolError
from ..tables import MAX_JSON_DEPTH, MAX_SAFE_INTEGER, Snapshot, freeze
from ..transitions import TableChange
from ..versions import acceptable

UPSERT, DELETE, TRUNCATE, VERSION = "upsert", "delete", "truncate", "version"


@dataclass(frozen=True, slots=True)
class Captured:
    """One record of the capture table."""

    id: int
    tx: str | None
    table: str
    op: str
    key: str | None
    """The key as the database rendered it: a JSON array of the key columns' values."""
    row: str | None
    """The row image as JSON text (upserts only)."""


@dataclass(frozen=True, slots=True)
class QuarantineEntry:
    """A captured record, or a row read in full, the contract cannot carry: set aside, reported."""

    table: str
    key: str
    """The key as the database rendered it (a JSON array), or the row key when it has one."""
    reason: str
    capture_id: int | None = None
    """The capture record's id (None: found by a full read of the table)."""


@dataclass(frozen=True, slots=True)
class CaptureBatch:
    """What one read of the capture table saw, in one snapshot of the database."""

    head: int
    """The last id the capture counter handed out (committed)."""
    records: tuple[Captured, ...]
    contents: Mapping[str, Mapping[str, Any]] | None = None
    """With a full read: every declared table's rows (key → row) in the same snapshot."""
    unreadable: tuple[QuarantineEntry, ...] = ()
    """With a full read: rows the contract cannot carry (left out of ``contents``)."""
    digests: Mapping[str, str] = field(default_factory=dict)
    """With a full read: each table's digest computed in the database (PostgreSQL)."""
    skipped: frozenset[str] = frozenset()
    """Tables a full read did not read: their digest is the one verified at the registry's
    current version, and no record touches them (so they equal the registry)."""
    more: bool = False
    """The read stopped at its batch limit: more records wait (no full read was made)."""
    backlog: int | None = None
    """With ``more``: how many records still wait after this batch."""
    lost: str | None = None
    """Why the records after the position cannot be trusted to be all of them (a logical
    replication slot that was dropped or invalidated): the tables are read in full (``contents``)
    and reconciled, never skipped silently."""
    rechecked: Mapping[str, Mapping[str, Any]] | None = None
    """With a recheck: a survey's candidate rows read again in this snapshot (key → row; a
    candidate absent is absent from the database); None when not read (postponed)."""
    recheck_unreadable: tuple[QuarantineEntry, ...] = ()
    """With a recheck: candidate rows the contract cannot carry (left to the quarantine)."""
    undeclared: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """With a full read or a recheck: per table, the columns the database table has that this
    worker does not declare (another version's); a registry row's values there are kept."""


@dataclass(frozen=True, slots=True)
class Frontier:
    """Which transactions' capture records a PostgreSQL reader has consumed: every transaction
    below ``cursor`` except those ``pending`` (in progress when last read, or not yet reached).

    The durable position (``position``: the lowest transaction not consumed) is what other
    workers and a restart resume at; a frontier lets the worker that read it skip what it
    consumed above that position, so a long transaction elsewhere in the cluster (which holds
    the position back) does not make every read start over from it."""

    cursor: int
    pending: frozenset[int] = frozenset()

    @property
    def position(self) -> int:
        return min(self.cursor, *self.pending) if self.pending else self.cursor

    def advance(self, xmax: int, in_progress: Iterable[int], last: int | None) -> Frontier:
        """The frontier after a read in a snapshot (``xmax``, ``in_progress``: its xip) returned
        every visible record of the transactions this frontier had not consumed, in transaction
        order, up to transaction ``last`` (None: all of them, no batch limit was hit)."""
        xip = frozenset(in_progress)
        if last is None:
            return Frontier(max(self.cursor, xmax), frozenset(t for t in xip if t < xmax))
        # Consumed now: each visible transaction up to ``last`` (below ``last`` < xmax, visible
        # means not in progress). Still pending: those above ``last`` and those in progress.
        cursor = max(self.cursor, last + 1)
        pending = {t for t in self.pending if t > last or t in xip}
        pending |= {t for t in xip if t <= last}
        return Frontier(cursor, frozenset(t for t in pending if t < cursor))


@dataclass(frozen=True, slots=True)
class CapturedTransaction:
    """The net effect of one transaction: per table, each key's final image (None: deleted)."""

    rows: Mapping[str, Mapping[str, Mapping[str, Any] | None]]
    truncated: frozenset[str] = frozenset()
    versions: Mapping[str, str] = field(default_factory=dict)
    """Versions a writer named for tables of this change set."""
    tx: str | None = None
    """The database transaction (PostgreSQL); None where records do not name one."""

    def changes(
        self,
        tables: Mapping[str, Snapshot],
        served: Callable[[str], Collection[str]] = lambda _: (),
    ) -> dict[str, TableChange]:
        """The change set as registry changes against the current ``tables``.

        A named version that does not move forward from the current one (a concurrent writer got
        there first) or that the table already had in this epoch (``served``) is dropped, and the
        server bumps the version itself: a captured change is never refused.
        """
        out: dict[str, TableChange] = {}
        for name in sorted({*self.rows, *self.truncated, *self.versions}):
            images = self.rows.get(name, {})
            current = tables[name]
            upsert = {key: row for key, row in images.items() if row is not None}
            gone = [key for key, row in images.items() if row is None]
            if name in self.truncated:
                gone = list(current.rows)
            delete = frozenset(key for key in gone if key in current.rows and key not in upsert)
            version = self.versions.get(name)
            if version is not None and not acceptable(version, current.version, served(name)):
                version = None
            out[name] = TableChange(upsert, delete, version=version)
        return out


def key_text(rendered: str | Sequence[Any]) -> str:
    """A row key from its key columns' values: the value itself for one column, else JSON."""
    values = json.loads(rendered) if isinstance(rendered, str) else list(rendered)
    if not isinstance(values, list) or not values:
        raise ProtocolError(ProblemType.INVALID_REQUEST, f"key {rendered!r} names no value")
    for value in values:
        if value is None:
            raise ProtocolError(ProblemType.INVALID_REQUEST, "a row has a NULL key")
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ProtocolError(
                ProblemType.INVALID_REQUEST, f"key value {value!r} is neither text nor an integer"
            )
    if len(values) == 1:
        return str(values[0])
    return canonical_json(values).decode("utf-8")


def json_number(text: str) -> int | float:
    """An integer of a row image: beyond ±(2^53−1) it is a double when its text is the double's
    (a jsonb or double column's 1e300, which PostgreSQL writes out as 1 and 300 zeros), else it
    stays an integer the contract refuses (``freeze``)."""
    value = int(text)
    if abs(value) <= MAX_SAFE_INTEGER:
        return value
    double = float(text)
    return double if math.isfinite(double) and Decimal(repr(double)) == value else value


def row_value(text: str | None) -> dict[str, Any]:
    """A row image (JSON object text) as a dict; a value nested too deeply to decode is a
    ``ProtocolError`` like any other value the contract cannot carry."""
    try:
        row = json.loads(text, parse_int=json_number) if text is not None else None
    except RecursionError:
        raise ProtocolError(
            ProblemType.INVALID_REQUEST,
            f"the row holds a value nested deeper than {MAX_JSON_DEPTH} levels",
        ) from None
    if not isinstance(row, dict):
        raise ProtocolError(ProblemType.INVALID_REQUEST, f"row image {text!r} is not an object")
    return row


def screen(records: Iterable[Captured]) -> tuple[list[Captured], list[QuarantineEntry]]:
    """Split ``records`` into those the contract can carry and those it cannot (quarantined).

    A delete of a row whose key is NULL is dropped: such a row was never carried.
    """
    good: list[Captured] = []
    bad: list[QuarantineEntry] = []
    for record in records:
        reason, key = None, record.key or ""
        if record.op in (UPSERT, DELETE):
            try:
                key = key_text(record.key or "")
                if record.op == UPSERT:
                    freeze(row_value(record.row), f"{record.table}[{key!r}]")
            except (ProtocolError, ValueError) as exc:
                if record.op == DELETE and _null_key(record.key):
                    continue
                reason = exc.detail if isinstance(exc, ProtocolError) else str(exc)
        if reason is None:
            good.append(record)
        else:
            bad.append(QuarantineEntry(record.table, key, reason, record.id))
    return good, bad


def _null_key(rendered: str | None) -> bool:
    try:
        values = json.loads(rendered or "")
    except ValueError:
        return False
    return isinstance(values, list) and None in values


def gap(after: int, batch: CaptureBatch) -> str | None:
    """Why the records after ``after`` cannot be trusted to be all of them, or None."""
    if batch.head < after:
        return f"the capture counter is at {batch.head}, behind position {after} (capture reset)"
    ids = [record.id for record in batch.records]
    if ids != list(range(after + 1, batch.head + 1)):
        missing = sorted(set(range(after + 1, batch.head + 1)) - set(ids))
        return f"capture records {missing[:5]}{'…' if len(missing) > 5 else ''} are missing"
    return None


def change_sets(records: Iterable[Captured], *, by_transaction: bool) -> list[CapturedTransaction]:
    """Fold records (in id order) into change sets: one per transaction, or one in all."""
    groups: list[list[Captured]] = []
    for record in records:
        if groups and (not by_transaction or groups[-1][-1].tx == record.tx):
            groups[-1].append(record)
        else:
            groups.append([record])
    return [fold(group) for group in groups]


def fold(records: Iterable[Captured]) -> CapturedTransaction:
    """The net effect of ``records``: the last image of each key wins."""
    rows: dict[str, dict[str, dict[str, Any] | None]] = {}
    truncated: set[str] = set()
    versions: dict[str, str] = {}
    tx: str | None = None
    for record in records:
        tx = record.tx
        if record.op == VERSION:
            if record.row:
                versions[record.table] = record.row
            continue
        table = rows.setdefault(record.table, {})
        if record.op == TRUNCATE:
            truncated.add(record.table)
            table.clear()
            continue
        if record.key is None:
            raise ProtocolError(
                ProblemType.INVALID_REQUEST, f"capture record {record.id} has no key"
            )
        key = key_text(record.key)
        if record.op == UPSERT:
            table[key] = row_value(record.row)
        elif record.op == DELETE:
            table[key] = None
        else:
            raise ProtocolError(
                ProblemType.INVALID_REQUEST, f"capture record {record.id}: unknown op {record.op!r}"
            )
    return CapturedTransaction(rows, frozenset(truncated), versions, tx)


def merged(sets: Sequence[CapturedTransaction]) -> CapturedTransaction:
    """Several change sets as one (the later images win)."""
    rows: dict[str, dict[str, Mapping[str, Any] | None]] = {}
    truncated: set[str] = set()
    versions: dict[str, str] = {}
    for change_set in sets:
        for name in change_set.truncated:
            truncated.add(name)
            rows[name] = {}
        for name, images in change_set.rows.items():
            rows.setdefault(name, {}).update(images)
        versions.update(change_set.versions)
    return CapturedTransaction(rows, frozenset(truncated), versions, sets[-1].tx if sets else None)
