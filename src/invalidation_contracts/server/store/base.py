"""A registry's history in a SQL database, shared by every worker that serves the registry.

The store is the registry's journal and the source of truth for its workers: each change is
written in one transaction, under a lock every writer takes, *before* any worker makes it visible;
a failed write leaves the database and the registry as they were. Workers catch up by reading
what was committed beyond their position (``server.history``). Row changes write only the rows
they touch.

Opening a store:
- empty or new: initialised from the domain's tables (the in-memory ones, and the SQL ones as the
  caller loads them) and rules under a new epoch, seq 0;
- written for another domain, not a registry, with unreadable rows or rules, or with a table set
  the domain does not declare: refused with ``StorageError`` (an operator must decide; nothing is
  overwritten);
- tables intact but the change log lost or inconsistent with them: the tables are kept and a new
  epoch starts at ``seq + 1`` with an empty log, every table counting as changed there, so any
  client position from the old history gets 410 resync-required.

The SQL is the same for SQLite and PostgreSQL; a ``Dialect`` says how to connect, lock, and name
the tables (``sqlite.py``, ``postgres.py``).
"""

from __future__ import annotations

import json
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Self

from pydantic import ValidationError

from ...protocol.models import TableTransition
from ...protocol.problems import ProtocolError
from ..changelog import LogRecord
from ..domain import Domain
from ..graph import KnowledgeGraph
from ..history import Advance, Catchup, Restore, TableHead
from ..registry import Registry, initial_state, new_epoch
from ..rules import Rule, RuleSet
from ..state import RegistryState
from ..tables import Snapshot
from .records import decode_record, encode_record, encode_row

DEFAULT_LOG_CAPACITY = 10_000
#: Keys per ``IN (...)`` list when a worker refreshes the rows a change touched.
KEY_BATCH = 500

logger = logging.getLogger(__name__)

SQLLoader = Callable[[], tuple[Mapping[str, Snapshot], Mapping[str, int]]]
"""Reads the SQL-backed tables of a new registry: snapshots, and their capture positions."""

TABLES = ("meta", "tables", "rows", "rules", "log", "positions")


class StorageError(RuntimeError):
    """The registry store cannot be opened or is not this domain's, or a change was not written."""


class HistoryLost(Exception):
    """The change log does not account for the stored tables."""


class Dialect(ABC):
    """What differs between databases: connecting, locking, table names, waking other workers."""

    where: str
    """The store, for messages (a path or a URL without its password)."""
    errors: tuple[type[Exception], ...]

    @abstractmethod
    def connect(self) -> Any:
        """A DB-API connection in autocommit mode (transactions are begun explicitly)."""

    @abstractmethod
    def prepare(self, db: Any) -> None:
        """Create the registry's tables, or check (and migrate) the ones there."""

    @abstractmethod
    def begin_write(self, db: Any) -> None:
        """Begin a transaction holding the lock every writer of this registry takes."""

    @abstractmethod
    def begin_read(self, db: Any) -> None:
        """Begin a read-only transaction on one consistent snapshot."""

    @abstractmethod
    def table(self, name: str) -> str:
        """The SQL name of one of ``TABLES``."""

    def usable(self, db: Any) -> bool:
        """False when the connection is lost and must be opened again."""
        return True

    def placeholders(self, sql: str) -> str:
        """``sql`` (written with ``?``) in the driver's parameter style."""
        return sql

    def batch(self, db: Any) -> AbstractContextManager[Any]:
        """Statements whose results are not read, sent together where the driver can."""
        return nullcontext()

    def committed(self, db: Any, seq: int) -> None:  # noqa: B027 - optional hook
        """Called inside a write transaction that moved the registry to ``seq``, before COMMIT."""

    def listener(self) -> Any:
        """A connection that wakes a worker when another commits (None: poll instead)."""
        return None

    def reason(self, exc: Exception) -> str:
        return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


@dataclass(frozen=True, slots=True)
class Loaded:
    """A registry read from the store: its state, log and log floor."""

    state: RegistryState
    records: tuple[LogRecord, ...]
    floor: int


class SQLRegistryStore:
    """One registry's history in one SQL database; every worker opens its own store object."""

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self.where = dialect.where
        self._lock = threading.RLock()
        self._capacity = DEFAULT_LOG_CAPACITY
        self._domain: Domain | None = None
        try:
            self._db: Any = dialect.connect()
        except dialect.errors as exc:
            raise StorageError(
                f"{self.where}: cannot open the registry store ({dialect.reason(exc)})"
            ) from exc

    # -- lifecycle ---------------------------------------------------------------------------

    def open_registry(
        self,
        domain: Domain,
        *,
        log_capacity: int = DEFAULT_LOG_CAPACITY,
        load_sql: SQLLoader | None = None,
    ) -> Registry:
        """Load the domain's registry (initialised on first use) with this store as its history.

        ``load_sql`` reads the domain's SQL-backed tables; it is called only when the store is new,
        under the writers' lock, so concurrent workers initialise it once.
        """
        if domain.sql_tables and load_sql is None:
            raise StorageError(f"domain {domain.name!r} has SQL tables; pass their loader")
        self._capacity = log_capacity
        self._domain = domain
        with self._lock:
            db = self._connection()
            try:
                self._dialect.prepare(db)
            except StorageError:
                raise
            except self._dialect.errors as exc:
                raise StorageError(
                    f"{self.where}: cannot read the registry store ({self._dialect.reason(exc)})"
                ) from exc
            with self._transaction(write=True) as db:
                meta = self._meta(db)
                if "domain" not in meta:
                    loaded = self._initialise(db, domain, load_sql)
                else:
                    loaded = self._load(db, domain, meta)
        registry = Registry.restore(
            loaded.state, loaded.records, floor=loaded.floor, log_capacity=log_capacity
        )
        registry.attach(self)
        return registry

    def close(self) -> None:
        """Release the store; later commits fail with ``StorageError``."""
        with self._lock:
            if self._db is not None:
                try:
                    self._db.close()
                finally:
                    self._db = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the History protocol ----------------------------------------------------------------

    @contextmanager
    def writing(self) -> Iterator[_Write]:
        """The writers' lock and one write transaction; committed when the block ends cleanly."""
        with self._transaction(write=True) as db:
            write = _Write(self, db)
            yield write
            if write.saved is not None:
                self._dialect.committed(db, write.saved)

    def catch_up(self, state: RegistryState) -> Catchup | None:
        """What was committed after ``state``, read in one consistent snapshot."""
        with self._transaction(write=False) as db:
            return self._catch_up(db, state)

    def listener(self) -> Any:
        """A wake-up on other workers' commits (PostgreSQL ``LISTEN``), or None: poll."""
        return self._dialect.listener()

    def head(self) -> tuple[str, int]:
        """The committed ``(epoch, seq)``."""
        with self._transaction(write=False) as db:
            meta = self._meta(db)
        return meta.get("epoch", ""), int(meta.get("seq", "0"))

    # -- internals ---------------------------------------------------------------------------

    def _connection(self) -> Any:
        if self._db is None:
            raise StorageError(f"{self.where}: the registry store is closed")
        return self._db

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Any]:
        errors = self._dialect.errors
        with self._lock:
            db = self._connection()
            try:
                if not self._dialect.usable(db):
                    db = self._db = self._dialect.connect()
                (self._dialect.begin_write if write else self._dialect.begin_read)(db)
            except errors as exc:
                raise StorageError(
                    f"{self.where}: cannot reach the registry store ({self._dialect.reason(exc)})"
                ) from exc
            try:
                yield db
                db.execute("COMMIT")
            except BaseException as exc:
                try:
                    db.execute("ROLLBACK")
                except errors:
                    pass
                if isinstance(exc, errors):
                    what = "a change was not persisted" if write else "cannot read the store"
                    raise StorageError(
                        f"{self.where}: {what} ({self._dialect.reason(exc)})"
                    ) from exc
                raise

    def _sql(self, sql: str) -> str:
        names = {name: self._dialect.table(name) for name in TABLES}
        return self._dialect.placeholders(sql.format(**names))

    def _run(self, db: Any, sql: str, params: Sequence[Any] = ()) -> Any:
        return db.execute(self._sql(sql), tuple(params))

    def _run_many(self, db: Any, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        batch = [tuple(row) for row in rows]
        if batch:
            db.cursor().executemany(self._sql(sql), batch)

    def _meta(self, db: Any) -> dict[str, str]:
        return {name: value for name, value in self._run(db, "SELECT name, value FROM {meta}")}

    def _set_meta(self, db: Any, **values: object) -> None:
        self._run_many(
            db,
            "INSERT INTO {meta} (name, value) VALUES (?, ?)"
            " ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            [(name, str(value)) for name, value in values.items()],
        )

    def _initialise(self, db: Any, domain: Domain, load_sql: SQLLoader | None) -> Loaded:
        memory = [
            Snapshot.build(name, spec.version, spec.rows)
            for name, spec in domain.memory_tables.items()
        ]
        sql, positions = load_sql() if load_sql is not None else ({}, {})
        state = initial_state([*memory, *sql.values()], domain.rules)
        self._write_all(db, state)
        self._set_meta(db, domain=domain.name, epoch=state.epoch, seq=0, log_floor=0)
        self._write_positions(db, positions)
        return Loaded(state, (), 0)

    def _load(self, db: Any, domain: Domain, meta: Mapping[str, str]) -> Loaded:
        if meta.get("domain") != domain.name:
            raise StorageError(
                f"{self.where} holds the registry of domain {meta.get('domain')!r}, "
                f"not {domain.name!r}"
            )
        snapshots, changed_at = self._read_tables(db)
        if set(snapshots) != set(domain.tables):
            raise StorageError(
                f"{self.where}: stored tables {sorted(snapshots)} differ from the tables domain "
                f"{domain.name!r} declares {sorted(domain.tables)}"
            )
        rules = self._read_rules(db, snapshots)
        try:
            return self._read_history(db, meta, snapshots, changed_at, rules)
        except HistoryLost as lost:
            return self._start_epoch(db, meta, snapshots, changed_at, rules, str(lost))

    def _read_tables(self, db: Any) -> tuple[dict[str, Snapshot], dict[str, int]]:
        heads = list(self._run(db, "SELECT name, version, changed_at FROM {tables} ORDER BY name"))
        rows: dict[str, dict[str, Any]] = {name: {} for name, _, _ in heads}
        for table, key, data in self._run(
            db, "SELECT table_name, key, data FROM {rows} ORDER BY table_name, key"
        ):
            if table not in rows:
                raise StorageError(
                    f"{self.where}: row {key!r} belongs to no stored table ({table!r})"
                )
            rows[table][key] = self._decode_row(table, key, data)
        snapshots: dict[str, Snapshot] = {}
        changed_at: dict[str, int] = {}
        for name, version, changed in heads:
            if not isinstance(version, str) or not isinstance(changed, int):
                raise StorageError(
                    f"{self.where}: table {name!r} has a corrupt version or position"
                )
            try:
                snapshots[name] = Snapshot.build(name, version, rows[name])
            except ProtocolError as exc:
                raise StorageError(
                    f"{self.where}: table {name!r} is corrupt ({exc.detail})"
                ) from None
            changed_at[name] = changed
        return snapshots, changed_at

    def _decode_row(self, table: str, key: str, data: Any) -> Any:
        try:
            return json.loads(data)
        except (TypeError, ValueError):
            raise StorageError(
                f"{self.where}: row {key!r} of table {table!r} is not valid JSON"
            ) from None

    def _read_rules(self, db: Any, snapshots: Mapping[str, Snapshot]) -> RuleSet:
        try:
            rules = RuleSet(
                Rule(a, b, r, v)
                for a, b, r, v in self._run(
                    db, "SELECT from_table, to_table, relation, via FROM {rules}"
                )
            )
            rules.check_tables(snapshots)
        except ProtocolError as exc:
            raise StorageError(f"{self.where}: stored rules are invalid ({exc.detail})") from None
        return rules

    def _read_log(self, db: Any, after: int) -> list[LogRecord]:
        records = []
        for position, text in self._run(
            db, "SELECT seq, record FROM {log} WHERE seq > ? ORDER BY seq", (after,)
        ):
            try:
                records.append(decode_record(position, text))
            except (KeyError, TypeError, ValueError, ValidationError):
                raise HistoryLost(f"log record {position} is unreadable") from None
        return records

    def _read_history(
        self,
        db: Any,
        meta: Mapping[str, str],
        snapshots: Mapping[str, Snapshot],
        changed_at: Mapping[str, int],
        rules: RuleSet,
    ) -> Loaded:
        try:
            seq, floor, epoch = int(meta["seq"]), int(meta["log_floor"]), meta["epoch"]
        except (KeyError, ValueError):
            raise HistoryLost("the history position is missing") from None
        if not epoch or not 0 <= floor <= seq:
            raise HistoryLost(f"position {seq} and log floor {floor} are inconsistent")
        records = self._read_log(db, -1)
        if [r.seq for r in records] != list(range(floor + 1, seq + 1)):
            raise HistoryLost(f"the log does not hold every change from {floor + 1} to {seq}")
        last: dict[str, TableTransition] = {}
        for record in records:
            for transition in record.transitions:
                last[transition.table] = transition
        for name, snapshot in snapshots.items():
            moved = last.get(name)
            if moved is None and not 0 <= changed_at[name] <= floor:
                raise HistoryLost(
                    f"table {name!r} moved at {changed_at[name]} but the log does not say so"
                )
            if moved is not None and (
                moved.seq != changed_at[name] or moved.new_version != snapshot.version
            ):
                raise HistoryLost(f"table {name!r} at {snapshot.version!r} disagrees with the log")
        tables = MappingProxyType(snapshots)
        state = RegistryState(
            tables=tables,
            rules=rules,
            graph=KnowledgeGraph.build(tables, rules),
            seq=seq,
            epoch=epoch,
            changed_at=MappingProxyType(dict(changed_at)),
            rules_changed_at=max([floor, *(r.seq for r in records if r.rule_change is not None)]),
        )
        return Loaded(state, tuple(records), floor)

    def _start_epoch(
        self,
        db: Any,
        meta: Mapping[str, str],
        snapshots: Mapping[str, Snapshot],
        changed_at: Mapping[str, int],
        rules: RuleSet,
        reason: str,
    ) -> Loaded:
        known = [int(meta["seq"])] if meta.get("seq", "").isdigit() else []
        (last_logged,) = self._run(db, "SELECT MAX(seq) FROM {log}").fetchone()
        seq = max([0, *known, *changed_at.values(), last_logged or 0]) + 1
        epoch = new_epoch()
        self._run(db, "DELETE FROM {log}")
        self._run(db, "UPDATE {tables} SET changed_at = ?", (seq,))
        self._set_meta(db, seq=seq, log_floor=seq, epoch=epoch)
        logger.warning(
            "%s: %s; starting a new history epoch %s at seq %d", self.where, reason, epoch, seq
        )
        tables = MappingProxyType(dict(snapshots))
        state = RegistryState(
            tables=tables,
            rules=rules,
            graph=KnowledgeGraph.build(tables, rules),
            seq=seq,
            epoch=epoch,
            changed_at=MappingProxyType({name: seq for name in snapshots}),
            rules_changed_at=seq,
        )
        return Loaded(state, (), seq)

    def _catch_up(self, db: Any, state: RegistryState) -> Catchup | None:
        meta = self._meta(db)
        try:
            epoch, seq, floor = meta["epoch"], int(meta["seq"]), int(meta["log_floor"])
        except (KeyError, ValueError):
            raise StorageError(f"{self.where}: the registry's position is unreadable") from None
        if epoch == state.epoch and seq == state.seq:
            return None
        if epoch != state.epoch or not floor <= state.seq < seq:
            return self._restore(db, meta)
        try:
            records = self._read_log(db, state.seq)
        except HistoryLost as lost:
            raise StorageError(f"{self.where}: {lost}") from None
        if [r.seq for r in records] != list(range(state.seq + 1, seq + 1)):
            raise StorageError(f"{self.where}: the log does not hold {state.seq + 1}..{seq}")
        touched: dict[str, set[str]] = {}
        for record in records:
            for transition in record.transitions:
                touched.setdefault(transition.table, set())
            for change in record.rows:
                touched.setdefault(change.table, set()).add(change.key)
        heads = {}
        for name, keys in touched.items():
            head = self._run(
                db, "SELECT version, changed_at FROM {tables} WHERE name = ?", (name,)
            ).fetchone()
            if head is None:
                raise StorageError(f"{self.where}: table {name!r} is gone from the store")
            heads[name] = TableHead(head[0], head[1], self._read_rows(db, name, keys))
        rules = None
        if any(record.rule_change is not None for record in records):
            rules = self._read_rules(db, state.tables)
        return Advance(tuple(records), heads, rules, floor)

    def _restore(self, db: Any, meta: Mapping[str, str]) -> Restore:
        if self._domain is None:
            raise StorageError(f"{self.where}: the store was never opened")
        snapshots, changed_at = self._read_tables(db)
        rules = self._read_rules(db, snapshots)
        try:
            loaded = self._read_history(db, meta, snapshots, changed_at, rules)
        except HistoryLost as lost:
            raise StorageError(f"{self.where}: {lost}") from None
        return Restore(loaded.state, loaded.records, loaded.floor)

    def _read_rows(
        self, db: Any, table: str, keys: set[str]
    ) -> dict[str, Mapping[str, Any] | None]:
        out: dict[str, Mapping[str, Any] | None] = dict.fromkeys(keys)
        ordered = sorted(keys)
        for start in range(0, len(ordered), KEY_BATCH):
            chunk = ordered[start : start + KEY_BATCH]
            marks = ", ".join("?" * len(chunk))
            for key, data in self._run(
                db,
                f"SELECT key, data FROM {{rows}} WHERE table_name = ? AND key IN ({marks})",
                (table, *chunk),
            ):
                out[key] = self._decode_row(table, key, data)
        return out

    def _write_all(self, db: Any, state: RegistryState) -> None:
        for name in ("rows", "tables", "rules", "log"):
            self._run(db, f"DELETE FROM {{{name}}}")
        self._run_many(
            db,
            "INSERT INTO {tables} (name, version, changed_at) VALUES (?, ?, ?)",
            [(s.name, s.version, state.changed_at[s.name]) for s in state.tables.values()],
        )
        self._run_many(
            db,
            "INSERT INTO {rows} (table_name, key, data) VALUES (?, ?, ?)",
            [
                (s.name, key, encode_row(row))
                for s in state.tables.values()
                for key, row in s.rows.items()
            ],
        )
        self._write_rules(db, state.rules)

    def _write_rules(self, db: Any, rules: RuleSet) -> None:
        self._run_many(
            db,
            "INSERT INTO {rules} (from_table, to_table, relation, via) VALUES (?, ?, ?, ?)",
            [(r.from_table, r.to_table, r.relation, r.via) for r in rules],
        )

    def _write_positions(self, db: Any, positions: Mapping[str, int]) -> None:
        self._run_many(
            db,
            "INSERT INTO {positions} (source, position) VALUES (?, ?)"
            " ON CONFLICT (source) DO UPDATE SET position = excluded.position",
            sorted(positions.items()),
        )

    def _save(
        self,
        db: Any,
        before: RegistryState,
        after: RegistryState,
        records: Sequence[LogRecord],
        positions: Mapping[str, int],
    ) -> None:
        floor = int(self._meta(db).get("log_floor", "0"))
        with self._dialect.batch(db):
            if after.epoch != before.epoch:
                self._write_all(db, after)
                self._set_meta(db, epoch=after.epoch, seq=after.seq, log_floor=after.seq)
            elif records:
                self._save_records(db, after, records, floor)
            self._write_positions(db, positions)

    def _save_records(
        self, db: Any, after: RegistryState, records: Sequence[LogRecord], floor: int
    ) -> None:
        self._run_many(
            db,
            "INSERT INTO {log} (seq, record) VALUES (?, ?)",
            [(record.seq, encode_record(record)) for record in records],
        )
        touched: dict[str, set[str]] = {}
        for record in records:
            for transition in record.transitions:
                touched.setdefault(transition.table, set())
            for change in record.rows:
                touched.setdefault(change.table, set()).add(change.key)
        for name, keys in touched.items():
            snapshot = after.tables[name]
            self._run(
                db,
                "UPDATE {tables} SET version = ?, changed_at = ? WHERE name = ?",
                (snapshot.version, after.changed_at[name], name),
            )
            self._run_many(
                db,
                "DELETE FROM {rows} WHERE table_name = ? AND key = ?",
                [(name, key) for key in sorted(keys) if key not in snapshot.rows],
            )
            self._run_many(
                db,
                "INSERT INTO {rows} (table_name, key, data) VALUES (?, ?, ?)"
                " ON CONFLICT (table_name, key) DO UPDATE SET data = excluded.data",
                [
                    (name, key, encode_row(snapshot.rows[key]))
                    for key in sorted(keys)
                    if key in snapshot.rows
                ],
            )
        if any(record.rule_change is not None for record in records):
            self._run(db, "DELETE FROM {rules}")
            self._write_rules(db, after.rules)
        floor = max(floor, after.seq - self._capacity)
        self._run(db, "DELETE FROM {log} WHERE seq <= ?", (floor,))
        self._set_meta(db, seq=after.seq, log_floor=floor)


class _Write:
    """One write transaction of a store (the ``HistoryWrite`` of ``server.history``)."""

    def __init__(self, store: SQLRegistryStore, db: Any) -> None:
        self._store = store
        self._db = db
        self.saved: int | None = None

    def catch_up(self, state: RegistryState) -> Catchup | None:
        return self._store._catch_up(self._db, state)

    def position(self, source: str) -> int | None:
        row = self._store._run(
            self._db, "SELECT position FROM {positions} WHERE source = ?", (source,)
        ).fetchone()
        return None if row is None else int(row[0])

    def save(
        self,
        before: RegistryState,
        after: RegistryState,
        records: Sequence[LogRecord],
        positions: Mapping[str, int],
    ) -> None:
        self._store._save(self._db, before, after, records, positions)
        self.saved = after.seq
