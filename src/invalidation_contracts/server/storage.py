"""Registry persistence: tables, versions, rules, seq, epoch and the change log in SQLite (WAL).

The store is the registry's journal: each commit is written in one SQLite transaction *before* the
registry makes it visible, so a failed write leaves both the file and the registry as they were.
Row changes write only the rows they touch.

Opening a file:
- empty or new: initialised from the domain's tables and rules under a new epoch, seq 0;
- written for another domain, by another schema version, not a registry, with unreadable rows or
  rules, or with a table set the domain does not declare: refused with ``StorageError`` (an
  operator must decide; nothing is overwritten);
- tables intact but the change log lost or inconsistent with them: the tables are kept and a new
  epoch starts at ``seq + 1`` with an empty log, every table counting as changed there, so any
  client position from the old history gets 410 resync-required.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Self

from pydantic import ValidationError

from ..protocol.canonical import canonical_json
from ..protocol.models import RowChange, RuleChange, TableTransition
from ..protocol.problems import ProtocolError
from .changelog import LogRecord
from .domain import Domain
from .graph import KnowledgeGraph
from .registry import Commit, Registry, new_epoch
from .rules import Rule, RuleSet
from .state import RegistryState
from .tables import Snapshot

SCHEMA_VERSION = 1
DEFAULT_LOG_CAPACITY = 10_000

logger = logging.getLogger(__name__)

_SCHEMA = (
    "CREATE TABLE ic_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    (
        "CREATE TABLE ic_tables (name TEXT PRIMARY KEY, version TEXT NOT NULL,"
        " changed_at INTEGER NOT NULL) WITHOUT ROWID"
    ),
    (
        "CREATE TABLE ic_rows (table_name TEXT NOT NULL REFERENCES ic_tables (name),"
        " key TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (table_name, key)) WITHOUT ROWID"
    ),
    (
        "CREATE TABLE ic_rules (from_table TEXT NOT NULL, to_table TEXT NOT NULL,"
        " relation TEXT NOT NULL, via TEXT, PRIMARY KEY (from_table, to_table, relation))"
        " WITHOUT ROWID"
    ),
    "CREATE TABLE ic_log (seq INTEGER PRIMARY KEY, record TEXT NOT NULL)",
)


class StorageError(RuntimeError):
    """The registry file cannot be opened or is not this domain's, or a change was not written."""


class RegistryStore(ABC):
    """Where a registry lives between restarts; it journals every commit before it is applied."""

    @abstractmethod
    def open_registry(
        self, domain: Domain, *, log_capacity: int = DEFAULT_LOG_CAPACITY
    ) -> Registry:
        """Load the domain's registry (initialised on first use) with this store as its journal."""

    @abstractmethod
    def journal(self, commit: Commit) -> None:
        """Persist ``commit`` atomically; on failure write nothing and raise ``StorageError``."""

    @abstractmethod
    def close(self) -> None:
        """Release the store; later commits fail with ``StorageError``."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _HistoryLost(Exception):
    """The change log does not account for the stored tables."""


@dataclass(frozen=True, slots=True)
class _History:
    seq: int
    epoch: str
    floor: int
    records: tuple[LogRecord, ...]
    changed_at: Mapping[str, int]


class SQLiteRegistryStore(RegistryStore):
    """One SQLite file (WAL, synchronous FULL) held exclusively by one server process."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        self._capacity = DEFAULT_LOG_CAPACITY
        self._floor = 0
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StorageError(
                f"{self.path}: cannot open the registry file ({_reason(exc)})"
            ) from exc
        try:
            db.execute("PRAGMA locking_mode = EXCLUSIVE")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = FULL")
            db.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as exc:
            db.close()
            raise StorageError(
                f"{self.path}: cannot open the registry file ({_reason(exc)})"
            ) from exc
        self._db: sqlite3.Connection | None = db

    def open_registry(
        self, domain: Domain, *, log_capacity: int = DEFAULT_LOG_CAPACITY
    ) -> Registry:
        with self._lock:
            db = self._connection()
            try:
                names = {
                    row[0]
                    for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                }
                if not names:
                    registry = self._initialise(db, domain, log_capacity)
                elif "ic_meta" not in names:
                    raise StorageError(
                        f"{self.path}: not an invalidation-contracts registry (other tables)"
                    )
                else:
                    registry = self._load(db, domain, log_capacity)
            except sqlite3.Error as exc:
                raise StorageError(
                    f"{self.path}: cannot read the registry file ({_reason(exc)})"
                ) from exc
            self._capacity = log_capacity
            registry.set_journal(self.journal)
            return registry

    def journal(self, commit: Commit) -> None:
        record, state = commit.record, commit.state
        try:
            with self._lock, self._transaction() as db:
                if record.transition is not None:
                    self._write_transition(db, state, record)
                if record.rule_change is not None:
                    db.execute("DELETE FROM ic_rules")
                    self._write_rules(db, state.rules)
                db.execute(
                    "INSERT INTO ic_log (seq, record) VALUES (?, ?)",
                    (record.seq, _encode_record(record)),
                )
                floor = max(self._floor, record.seq - self._capacity)
                if floor > self._floor:
                    db.execute("DELETE FROM ic_log WHERE seq <= ?", (floor,))
                _set_meta(db, seq=record.seq, log_floor=floor)
            self._floor = floor
        except sqlite3.Error as exc:
            raise StorageError(
                f"{self.path}: change {record.seq} was not persisted ({_reason(exc)})"
            ) from exc

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None

    # -- internals ---------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._db is None:
            raise StorageError(f"{self.path}: the registry store is closed")
        return self._db

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def _initialise(self, db: sqlite3.Connection, domain: Domain, log_capacity: int) -> Registry:
        registry = domain.registry(log_capacity=log_capacity)
        state = registry.state
        with self._transaction():
            for statement in _SCHEMA:
                db.execute(statement)
            db.executemany(
                "INSERT INTO ic_meta (name, value) VALUES (?, ?)",
                [
                    ("schema_version", str(SCHEMA_VERSION)),
                    ("domain", domain.name),
                    ("epoch", state.epoch),
                    ("seq", "0"),
                    ("log_floor", "0"),
                ],
            )
            for snapshot in state.tables.values():
                db.execute(
                    "INSERT INTO ic_tables (name, version, changed_at) VALUES (?, ?, 0)",
                    (snapshot.name, snapshot.version),
                )
                db.executemany(
                    "INSERT INTO ic_rows (table_name, key, data) VALUES (?, ?, ?)",
                    ((snapshot.name, key, _encode_row(row)) for key, row in snapshot.rows.items()),
                )
            self._write_rules(db, state.rules)
        self._floor = 0
        return registry

    def _load(self, db: sqlite3.Connection, domain: Domain, log_capacity: int) -> Registry:
        meta = dict(db.execute("SELECT name, value FROM ic_meta"))
        if meta.get("schema_version") != str(SCHEMA_VERSION):
            raise StorageError(
                f"{self.path}: registry schema version {meta.get('schema_version')!r}; "
                f"this library reads version {SCHEMA_VERSION}"
            )
        if meta.get("domain") != domain.name:
            raise StorageError(
                f"{self.path} holds the registry of domain {meta.get('domain')!r}, "
                f"not {domain.name!r}"
            )
        snapshots, changed_at = self._read_tables(db)
        if set(snapshots) != set(domain.tables):
            raise StorageError(
                f"{self.path}: stored tables {sorted(snapshots)} differ from the tables domain "
                f"{domain.name!r} declares {sorted(domain.tables)}"
            )
        rules = self._read_rules(db, snapshots)
        try:
            history = self._read_history(db, meta, snapshots, changed_at)
        except _HistoryLost as lost:
            history = self._start_epoch(db, meta, changed_at, str(lost))
        self._floor = history.floor
        tables = MappingProxyType(snapshots)
        state = RegistryState(
            tables=tables,
            rules=rules,
            graph=KnowledgeGraph.build(tables, rules),
            seq=history.seq,
            epoch=history.epoch,
            changed_at=MappingProxyType(dict(history.changed_at)),
            rules_changed_at=max(
                [history.floor, *(r.seq for r in history.records if r.rule_change is not None)]
            ),
        )
        return Registry.restore(
            state, history.records, floor=history.floor, log_capacity=log_capacity
        )

    def _read_tables(self, db: sqlite3.Connection) -> tuple[dict[str, Snapshot], dict[str, int]]:
        heads = list(db.execute("SELECT name, version, changed_at FROM ic_tables ORDER BY name"))
        rows: dict[str, dict[str, Any]] = {name: {} for name, _, _ in heads}
        for table, key, data in db.execute(
            "SELECT table_name, key, data FROM ic_rows ORDER BY table_name, key"
        ):
            if table not in rows:
                raise StorageError(
                    f"{self.path}: row {key!r} belongs to no stored table ({table!r})"
                )
            try:
                rows[table][key] = json.loads(data)
            except (TypeError, ValueError):
                raise StorageError(
                    f"{self.path}: row {key!r} of table {table!r} is not valid JSON"
                ) from None
        snapshots: dict[str, Snapshot] = {}
        changed_at: dict[str, int] = {}
        for name, version, changed in heads:
            if not isinstance(version, str) or not isinstance(changed, int):
                raise StorageError(f"{self.path}: table {name!r} has a corrupt version or position")
            try:
                snapshots[name] = Snapshot.build(name, version, rows[name])
            except ProtocolError as exc:
                raise StorageError(
                    f"{self.path}: table {name!r} is corrupt ({exc.detail})"
                ) from None
            changed_at[name] = changed
        return snapshots, changed_at

    def _read_rules(self, db: sqlite3.Connection, snapshots: Mapping[str, Snapshot]) -> RuleSet:
        try:
            rules = RuleSet(
                Rule(a, b, r, v)
                for a, b, r, v in db.execute(
                    "SELECT from_table, to_table, relation, via FROM ic_rules"
                )
            )
            rules.check_tables(snapshots)
        except ProtocolError as exc:
            raise StorageError(f"{self.path}: stored rules are invalid ({exc.detail})") from None
        return rules

    def _read_history(
        self,
        db: sqlite3.Connection,
        meta: Mapping[str, str],
        snapshots: Mapping[str, Snapshot],
        changed_at: Mapping[str, int],
    ) -> _History:
        try:
            seq, floor, epoch = int(meta["seq"]), int(meta["log_floor"]), meta["epoch"]
        except (KeyError, ValueError):
            raise _HistoryLost("the history position is missing") from None
        if not epoch or not 0 <= floor <= seq:
            raise _HistoryLost(f"position {seq} and log floor {floor} are inconsistent")
        records = []
        for position, text in db.execute("SELECT seq, record FROM ic_log ORDER BY seq"):
            try:
                records.append(_decode_record(position, text))
            except (KeyError, TypeError, ValueError, ValidationError):
                raise _HistoryLost(f"log record {position} is unreadable") from None
        if [r.seq for r in records] != list(range(floor + 1, seq + 1)):
            raise _HistoryLost(f"the log does not hold every change from {floor + 1} to {seq}")
        last: dict[str, TableTransition] = {}
        for record in records:
            if record.transition is not None:
                last[record.transition.table] = record.transition
        for name, snapshot in snapshots.items():
            moved = last.get(name)
            if moved is None and not 0 <= changed_at[name] <= floor:
                raise _HistoryLost(
                    f"table {name!r} moved at {changed_at[name]} but the log does not say so"
                )
            if moved is not None and (
                moved.seq != changed_at[name] or moved.new_version != snapshot.version
            ):
                raise _HistoryLost(f"table {name!r} at {snapshot.version!r} disagrees with the log")
        return _History(seq, epoch, floor, tuple(records), changed_at)

    def _start_epoch(
        self,
        db: sqlite3.Connection,
        meta: Mapping[str, str],
        changed_at: Mapping[str, int],
        reason: str,
    ) -> _History:
        known = [int(meta["seq"])] if meta.get("seq", "").isdigit() else []
        (last_logged,) = db.execute("SELECT MAX(seq) FROM ic_log").fetchone()
        seq = max([0, *known, *changed_at.values(), last_logged or 0]) + 1
        epoch = new_epoch()
        with self._transaction():
            db.execute("DELETE FROM ic_log")
            db.execute("UPDATE ic_tables SET changed_at = ?", (seq,))
            _set_meta(db, seq=seq, log_floor=seq, epoch=epoch)
        logger.warning(
            "%s: %s; starting a new history epoch %s at seq %d", self.path, reason, epoch, seq
        )
        return _History(seq, epoch, seq, (), {name: seq for name in changed_at})

    @staticmethod
    def _write_transition(db: sqlite3.Connection, state: RegistryState, record: LogRecord) -> None:
        assert record.transition is not None
        name = record.transition.table
        snapshot = state.tables[name]
        db.execute(
            "UPDATE ic_tables SET version = ?, changed_at = ? WHERE name = ?",
            (snapshot.version, state.changed_at[name], name),
        )
        db.executemany(
            "DELETE FROM ic_rows WHERE table_name = ? AND key = ?",
            [(name, change.key) for change in record.rows if change.op == "removed"],
        )
        db.executemany(
            "INSERT OR REPLACE INTO ic_rows (table_name, key, data) VALUES (?, ?, ?)",
            [
                (name, change.key, _encode_row(snapshot.rows[change.key]))
                for change in record.rows
                if change.op != "removed"
            ],
        )

    @staticmethod
    def _write_rules(db: sqlite3.Connection, rules: RuleSet) -> None:
        db.executemany(
            "INSERT INTO ic_rules (from_table, to_table, relation, via) VALUES (?, ?, ?, ?)",
            [(r.from_table, r.to_table, r.relation, r.via) for r in rules],
        )


def _set_meta(db: sqlite3.Connection, **values: object) -> None:
    db.executemany(
        "INSERT OR REPLACE INTO ic_meta (name, value) VALUES (?, ?)",
        [(name, str(value)) for name, value in values.items()],
    )


def _encode_row(row: Mapping[str, Any]) -> str:
    return canonical_json(row).decode("utf-8")


def _encode_record(record: LogRecord) -> str:
    data: dict[str, Any] = {"seq": record.seq}
    if record.transition is not None:
        data["transition"] = record.transition.to_wire()
        data["rows"] = [[change.op, change.key] for change in record.rows]
    if record.rule_change is not None:
        data["rule_change"] = record.rule_change.to_wire()
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def _decode_record(seq: int, text: str) -> LogRecord:
    data = json.loads(text)
    if data["seq"] != seq:
        raise ValueError("log record filed under another seq")
    transition = (
        TableTransition.model_validate(data["transition"]) if "transition" in data else None
    )
    rule_change = RuleChange.model_validate(data["rule_change"]) if "rule_change" in data else None
    if (transition is None and rule_change is None) or any(
        item is not None and item.seq != seq for item in (transition, rule_change)
    ):
        raise ValueError("log record is empty or disagrees with its seq")
    rows: tuple[RowChange, ...] = ()
    if transition is not None:
        rows = tuple(
            RowChange(
                seq=seq,
                table=transition.table,
                key=key,
                op=op,
                old_version=transition.old_version,
                new_version=transition.new_version,
            )
            for op, key in data["rows"]
        )
    return LogRecord(seq=seq, transition=transition, rows=rows, rule_change=rule_change)


def _reason(exc: sqlite3.Error) -> str:
    text = str(exc)
    if "locked" in text:
        return f"{text}; is another server using this file?"
    return text
