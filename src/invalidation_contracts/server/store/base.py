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

The SQL is the same for SQLite and PostgreSQL (``reader``, ``writer``); a ``Dialect`` says how to
connect, lock, and name the tables (``sqlite.py``, ``postgres.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Generic, Self

from ..changelog import LogRecord
from ..domain import Domain
from ..history import Catchup
from ..registry import Registry
from ..state import RegistryState
from . import evolve, reader, writer
from .crashpoints import crash_point
from .dialect import Connection, DB_co, Dialect, SQLLoader, Statements, StorageError
from .highwater import HighWater, Mark
from .reader import Loaded

if TYPE_CHECKING:
    from ..capture.source import Wakeup

DEFAULT_LOG_CAPACITY = 10_000


class SQLRegistryStore(Generic[DB_co]):
    """One registry's history in one SQL database; every worker opens its own store object."""

    def __init__(self, dialect: Dialect[DB_co]) -> None:
        self._dialect = dialect
        self.where = dialect.where
        self._lock = threading.RLock()
        self._capacity = DEFAULT_LOG_CAPACITY
        self._tables: frozenset[str] = frozenset()  # the tables served since the open
        self._marks = HighWater(dialect.mark_path(), dialect.where)
        try:
            self._db: DB_co | None = dialect.connect()
        except dialect.errors as exc:
            raise StorageError(
                f"{self.where}: cannot open the registry store ({dialect.reason(exc)})"
            ) from exc

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
        with self._lock:
            self._prepare()
            loaded = self._read_stored(domain)
            if loaded is None:
                loaded = self._open_locked(domain, load_sql)
        self._tables = frozenset(loaded.state.tables)
        registry = Registry.restore(
            loaded.state, loaded.records, floor=loaded.floor, log_capacity=log_capacity
        )
        registry.attach(self)
        return registry

    def _read_stored(self, domain: Domain) -> Loaded | None:
        """The stored registry read in one read-only snapshot, without the writers' lock: a large
        one takes a while, and the workers serving beside it keep committing meanwhile. None when
        opening it writes something (a new store, a table added, a restore, a lost history)."""
        with self._transaction(write=False) as s:
            meta = s.meta()
            if meta.get("domain") != domain.name:
                return None
            if self._restored(s, meta) is not None or not self._marks.covers(*_head(meta)):
                return None
            return writer.load_stored(s, domain, meta)

    def _open_locked(self, domain: Domain, load_sql: SQLLoader | None) -> Loaded:
        """Initialise, evolve or repair the stored registry under the writers' lock."""
        with self._moving() as move:
            s, meta = move.s, move.s.meta()
            if "domain" not in meta:
                loaded = writer.initialise(s, domain, load_sql)
            else:
                restored = self._restored(s, meta)
                if restored is None:
                    self._marks.cover(*_head(meta))
                loaded = writer.load_or_repair(s, domain, meta, restored)
            move.to(loaded.state.epoch, loaded.state.seq)
        return loaded

    def _prepare(self) -> None:
        """Bring the store's schema to this version (under the lock); a store it cannot read is
        a ``StorageError`` naming it."""
        try:
            self._dialect.prepare(self._connection())
        except self._dialect.errors as exc:
            raise StorageError(
                f"{self.where}: cannot read the registry store ({self._dialect.reason(exc)})"
            ) from exc

    def remove_tables(self, names: Sequence[str]) -> int:
        """Remove stored tables no version of the domain serves any more (``db remove-table``):
        one change set each, in the same history; running workers drop them as they follow.
        Returns the new seq. Opening a worker never removes a table (``store.evolve``)."""
        with self._lock:
            self._prepare()
            with self._moving() as move:
                if "domain" not in move.s.meta():
                    raise StorageError(f"{self.where} holds no registry")
                self._settle(move)
                seq = evolve.remove(move.s, names)
                move.to(move.s.meta()["epoch"], seq)
                self._dialect.committed(move.s.db, seq)
        return seq

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
        """The writers' lock and one write transaction; committed when the block ends cleanly.

        A history restored under the running workers gets its new epoch first: the write lands
        after it, never on a seq the old history already served."""
        with self._moving() as move:
            renewed = self._settle(move)
            write = _Write(move.s, self._capacity)
            yield write
            if write.saved is not None:
                move.to(*write.saved_at)
                if move.moved:  # a write of positions alone serves nothing new: no wake-up
                    self._dialect.committed(move.s.db, write.saved)
            elif renewed is not None:
                self._dialect.committed(move.s.db, renewed)

    def catch_up(self, state: RegistryState) -> Catchup | None:
        """What was committed after ``state``, read in one consistent snapshot.

        Each catch-up (every follower check) also asks whether the stored history is still the
        one its last commit left (``highwater``: the mark beside a file, the commit identity of a
        PostgreSQL registry), and whether the mark vouches for the head it would adopt. When not,
        the check is made again under the writers' lock: the mark is raised to a head another
        writer committed but has not marked yet (it died, or is about to), and a restored
        history gets a new epoch (SPEC §1), which this worker adopts at once."""
        with self._transaction(write=False) as s:
            meta = s.meta()
            if self._restored(s, meta, state) is None and self._marks.covers(*_head(meta)):
                return reader.catch_up(s, state, meta)
        with self._moving() as move:  # a head not marked yet, or a restore
            renewed = self._settle(move, state)
            caught = reader.catch_up(move.s, state)
            if renewed is not None:
                self._dialect.committed(move.s.db, renewed)
        return caught

    def listener(self) -> Wakeup | None:
        """A wake-up on other workers' commits (PostgreSQL ``LISTEN``), or None: poll."""
        return self._dialect.listener()

    def interrupt(self) -> None:
        """From another thread, without the store's lock (a stalled call holds it): make a call
        waiting on the store's connection fail, so its caller reconnects (PostgreSQL)."""
        db = self._db
        if db is not None:
            self._dialect.interrupt(db)

    def head(self) -> tuple[str, int]:
        """The committed ``(epoch, seq)``."""
        with self._transaction(write=False) as s:
            meta = s.meta()
        return meta.get("epoch", ""), int(meta.get("seq", "0"))

    # -- internals ---------------------------------------------------------------------------

    def _restored(
        self, s: Statements[DB_co], meta: Mapping[str, str], state: RegistryState | None = None
    ) -> str | None:
        """Why the stored history is not a clean continuation of what was served (None: it is).

        ``state``: a running worker's, committed once: the same epoch at a lower seq is a
        history gone back (no commit goes back; a new epoch is the only legitimate reset)."""
        epoch, seq = _head(meta)
        if state is not None and epoch == state.epoch and seq < state.seq:
            return (
                f"the registry went back from seq {state.seq} to seq {seq} in epoch {epoch}: "
                "it was restored"
            )
        reason = self._dialect.discontinuity(s.db, epoch, seq)
        return reason if reason is not None else self._marks.discontinuity(epoch, seq)

    def _settle(self, move: _Move[DB_co], state: RegistryState | None = None) -> int | None:
        """Under the writers' lock: the mark raised to the committed head when the stored history
        is a clean continuation (None), else a new epoch (its seq; ``state``: this worker's,
        which was committed)."""
        s = move.s
        meta = s.meta()
        reason = self._restored(s, meta, state)
        if reason is None:
            self._marks.cover(*_head(meta))
            return None
        stored = {name for (name,) in s.run("SELECT name FROM {tables}")}
        if self._tables and stored != self._tables:  # a restore still under way (pg_dump's
            raise StorageError(  # COPY fills meta before tables), or another registry
                f"{self.where}: {reason}, and it holds tables {sorted(stored)}, not the ones "
                f"served ({sorted(self._tables)}): waiting for a complete registry"
            )
        loaded = writer.restart_epoch(s, meta, f"{reason} (found by a running worker)")
        move.to(loaded.state.epoch, loaded.state.seq)
        return loaded.state.seq

    @contextmanager
    def _moving(self) -> Iterator[_Move[DB_co]]:
        """A write transaction that may move the head; the position is stamped (PostgreSQL's
        identity) and the mark follows it (``highwater``): an epoch change is announced before
        the COMMIT, and the mark is raised to the new head right after it, before anyone serves
        it. A kill at any step leaves a file the next check takes as a continuation."""
        with self._transaction(write=True) as s:
            move = _Move(s)
            yield move
            target = move.target
            if target is not None:
                if move.start is None or target.epoch != move.start.epoch:
                    self._marks.intend(move.start, target)
                self._dialect.stamp(s.db, target.epoch, target.seq)
            if move.moved:
                crash_point("before-commit")
        if move.moved:
            crash_point("after-commit")
            self._confirm()

    def _confirm(self) -> None:
        """Raise the mark to the committed head, under the writers' lock (a second, read-only
        transaction: the one that committed has released the lock with its COMMIT). A failure
        here means the change is committed but no worker serves it until a later check marks
        it (``catch_up``)."""
        if self._marks.path is None:
            return
        with self._transaction(write=True) as s:
            meta = s.meta()
            if self._restored(s, meta) is None:
                self._marks.cover(*_head(meta))

    def _connection(self) -> DB_co:
        if self._db is None:
            raise StorageError(f"{self.where}: the registry store is closed")
        return self._db

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Statements[DB_co]]:
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
                yield Statements(self._dialect, db)
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


def _head(meta: Mapping[str, str]) -> tuple[str, int]:
    """The stored ``(epoch, seq)`` (``("", -1)`` for a registry not yet written)."""
    text = meta.get("seq", "")
    return meta.get("epoch", ""), int(text) if text.isdigit() else -1


class _Move(Generic[DB_co]):
    """One write transaction's head: where it started, and where it ends (None: it stays)."""

    def __init__(self, statements: Statements[DB_co]) -> None:
        self.s = statements
        meta = statements.meta()
        self.start = Mark(*_head(meta)) if "epoch" in meta else None
        self.target: Mark | None = None

    def to(self, epoch: str, seq: int) -> None:
        self.target = Mark(epoch, seq)

    @property
    def moved(self) -> bool:
        return self.target is not None and self.target != self.start


class _Write:
    """One write transaction of a store (the ``HistoryWrite`` of ``server.history``)."""

    def __init__(self, statements: Statements[Connection], capacity: int) -> None:
        self._s = statements
        self._capacity = capacity
        self.saved: int | None = None
        self.saved_at: tuple[str, int] = ("", 0)

    def catch_up(self, state: RegistryState) -> Catchup | None:
        return reader.catch_up(self._s, state)

    def position(self, source: str) -> int | None:
        return self._s.position(source)

    def save(
        self,
        before: RegistryState,
        after: RegistryState,
        records: Sequence[LogRecord],
        positions: Mapping[str, int],
    ) -> None:
        writer.save(self._s, before, after, records, positions, self._capacity)
        self.saved = after.seq
        self.saved_at = (after.epoch, after.seq)
