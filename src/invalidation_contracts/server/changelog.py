"""The bounded change log behind ``GET /contract/changes``."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, replace

from ..protocol.models import ChangesFeed, RowChange, RuleChange, TableTransition
from ..protocol.problems import ProblemType, ProtocolError


@dataclass(frozen=True, slots=True)
class LogRecord:
    """Everything one registry change did, under one ``seq``.

    A change set that moved several tables at once (one database transaction) has one transition
    per table, all under the same ``seq``.
    """

    seq: int
    transitions: tuple[TableTransition, ...] = ()
    rows: tuple[RowChange, ...] = ()
    rule_change: RuleChange | None = None
    committed_at: float | None = None
    """Wall-clock seconds (Unix time) at which the change set was committed to the shared
    history (None: not written to one, or written before the history kept it)."""


def stamped(records: Iterable[LogRecord], at: float) -> list[LogRecord]:
    """``records`` with their commit time set to ``at``."""
    return [replace(record, committed_at=at) for record in records]


def touched_rows(records: Iterable[LogRecord]) -> dict[str, set[str]]:
    """Each table ``records`` move, with the keys of its rows they change (none: only its
    version moved)."""
    touched: dict[str, set[str]] = {}
    for record in records:
        for transition in record.transitions:
            touched.setdefault(transition.table, set())
        for change in record.rows:
            touched.setdefault(change.table, set()).add(change.key)
    return touched


def _versions(record: LogRecord) -> Iterator[tuple[str, str]]:
    """Each ``(table, version)`` a record's transitions name (old and new; "" for none)."""
    for move in record.transitions:
        yield move.table, move.old_version
        yield move.table, move.new_version or ""


class ChangeLog:
    """The most recent ``capacity`` records. Older positions answer resync-required.

    It keeps, per table, how many retained records name each version, so "which versions has
    this table had as far as the log reaches" costs nothing per record (``served``).
    """

    def __init__(
        self, capacity: int = 10_000, records: Iterable[LogRecord] = (), floor: int = 0
    ) -> None:
        if capacity < 1:
            raise ValueError("change log capacity must be at least 1")
        self.capacity = capacity
        self._records: deque[LogRecord] = deque(maxlen=capacity)
        self._floor = floor
        self._served: dict[str, Counter[str]] = {}
        for record in records:
            self.append(record)

    @property
    def floor(self) -> int:
        """The oldest ``since`` the log can still answer."""
        return self._records[0].seq - 1 if self._records else self._floor

    def append(self, record: LogRecord) -> None:
        if self._records and record.seq <= self._records[-1].seq:
            raise ValueError("change log records must have increasing seq")
        if len(self._records) == self.capacity:
            self._floor = self._records[0].seq
            for table, version in _versions(self._records[0]):
                counts = self._served[table]
                counts[version] -= 1
                if not counts[version]:
                    del counts[version]
        self._records.append(record)
        for table, version in _versions(record):
            self._served.setdefault(table, Counter())[version] += 1

    def served(self, table: str) -> Collection[str]:
        """Every version the retained records name for ``table`` (a live view, not a copy:
        read it under the writers' lock)."""
        return self._served.get(table, {}).keys()

    def records(self) -> tuple[LogRecord, ...]:
        return tuple(self._records)

    def between(self, since: int, last_seq: int) -> tuple[LogRecord, ...]:
        """The retained records after ``since`` up to ``last_seq``, walked from the newest (the
        recent ones are asked for); call it under the writers' lock."""
        found: list[LogRecord] = []
        for record in reversed(self._records):
            if record.seq <= since:
                break
            if record.seq <= last_seq:
                found.append(record)
        return tuple(reversed(found))

    def since(
        self,
        since: int,
        last_seq: int,
        epoch: str,
        *,
        tables: Iterable[str] | None = None,
        client_epoch: str | None = None,
    ) -> ChangesFeed:
        """Every change after ``since`` (optionally only for ``tables``), or resync-required."""
        if client_epoch is not None and client_epoch != epoch:
            raise ProtocolError(
                ProblemType.RESYNC_REQUIRED,
                f"epoch {client_epoch!r} is not this registry's history",
            )
        if since < 0 or since > last_seq:
            raise ProtocolError(
                ProblemType.RESYNC_REQUIRED,
                f"position {since} is not in this history (last is {last_seq})",
            )
        # A writer may append (and trim) while a reader runs: work on one copy (atomic under the
        # GIL) and stop at ``last_seq``, so the feed describes exactly the state the caller read.
        records = tuple(self._records)
        floor = records[0].seq - 1 if records else self._floor
        if since < floor:
            raise ProtocolError(
                ProblemType.RESYNC_REQUIRED,
                f"position {since} is older than the retained log (oldest answerable is {floor})",
            )
        wanted = None if tables is None else set(tables)
        rows: list[RowChange] = []
        transitions: list[TableTransition] = []
        rule_changes: list[RuleChange] = []
        start = since - floor  # seqs are contiguous, so the first record after ``since`` is here
        if start < len(records) and records[start].seq != since + 1:
            start = next((i for i, r in enumerate(records) if r.seq > since), len(records))
        for record in records[start:]:
            if record.seq > last_seq:
                break
            for transition in record.transitions:
                if wanted is None or transition.table in wanted:
                    transitions.append(transition)
                    rows.extend(row for row in record.rows if row.table == transition.table)
            if record.rule_change is not None:
                rule_changes.append(record.rule_change)
        return ChangesFeed(
            contract_epoch=epoch,
            since=since,
            last_seq=last_seq,
            rows=rows,
            tables=transitions,
            rules=rule_changes,
        )
