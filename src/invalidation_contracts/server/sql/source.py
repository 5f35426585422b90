"""The provider's database as a source of reference tables: declared tables, their capture, reads.

``SQLSource.open()`` checks every declaration against the database and installs the capture
triggers; ``load()`` reads every declared table in one snapshot, with the capture position that
snapshot is at; ``read(after)`` reads the captured records after a position (and, to verify, the
tables in the same snapshot). Writing rows into the declared tables is ``upsert.RowWriter``'s job.
Nothing here changes the registry: ``worker.runtime`` does, under the registry's write lock.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from ...protocol.problems import ProtocolError
from ..capture.records import CaptureBatch, Captured, QuarantineEntry, key_text, row_value
from ..capture.source import CommitProbe, Wakeup
from ..capture.steps import SourceError
from ..domain import SQLTable
from ..tables import Snapshot, freeze
from .capture import DEFAULT_CAPTURE_SCHEMA, CaptureDialect, PostgresCapture, capture_dialect
from .consumed import ConsumedCapture
from .declare import BoundTable, Declarations, bind, newly_broken, rebind, undeclared
from .engine import failure_reason, make_engine
from .install import DEFAULT_LOCK_TIMEOUT_S, CaptureOutdated, InstallMode, ensure_installed
from .rewrite import current_images
from .survey import RESURVEY_S, Surveyed, recheck_batch, stall_bound
from .upsert import RowWriter

logger = logging.getLogger(__name__)
DEFAULT_RECONCILE_INTERVAL_S = 60.0
"""How often a worker compares each declared table with its registry (a digest in the database,
then the rows of a table whose digest moved)."""
DEFAULT_BATCH_RECORDS = 2_000
"""Capture records consumed per registry transaction while a worker catches up (each batch
commits: the watchdog never undoes finished work, and readers see progress)."""


class SQLSource(Surveyed):
    """The declared tables of one database (SQLite or PostgreSQL) and their change capture."""

    def __init__(
        self,
        database: str | URL | Engine,
        tables: Mapping[str, SQLTable],
        *,
        name: str = "sql",
        capture_schema: str = DEFAULT_CAPTURE_SCHEMA,
        install: InstallMode = "auto",
        lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
        reconcile_interval_s: float | None = DEFAULT_RECONCILE_INTERVAL_S,
        batch_records: int = DEFAULT_BATCH_RECORDS,
    ) -> None:
        """``database``: a URL (an engine is made and owned) or an engine (the caller's).

        ``install``: ``"auto"`` installs a stale capture at open; ``"check"`` refuses to open
        (run ``invalidation-contracts db upgrade`` first). ``lock_timeout_s`` bounds each install's
        wait for a table's lock (PostgreSQL). ``reconcile_interval_s``: how often the tables are
        compared with the registry to catch writes around the triggers (None: only at open).
        ``batch_records``: how many capture records (PostgreSQL; whole transactions) a worker
        consumes per registry transaction while it catches up with a backlog."""
        self.reconcile_interval_s = reconcile_interval_s
        self.batch_records = batch_records
        self._reconciled_at = time.monotonic()
        self._loaded: dict[str, str] = {}
        self.install: InstallMode = install
        self.lock_timeout_s = lock_timeout_s
        self._owned = not isinstance(database, Engine)
        self.engine = make_engine(database) if not isinstance(database, Engine) else database
        self.name = name
        self.declared = dict(tables)
        self.bound: dict[str, BoundTable] = {}
        self.broken: dict[str, str] = {}  # set aside: the database no longer matches (rebind)
        self.dialect: CaptureDialect = capture_dialect(self.engine, capture_schema)
        self.rows = RowWriter(self.engine, self.dialect, self._connect)
        self._consumed = (
            ConsumedCapture(self.dialect, batch_records)
            if isinstance(self.dialect, PostgresCapture)
            else None
        )
        self._opened: weakref.WeakSet[Any] = weakref.WeakSet()  # the driver's connections
        if self.engine.dialect.name == "postgresql":
            from sqlalchemy import event

            opened = self._opened  # not self: a caller's engine must not keep the source alive
            event.listen(self.engine, "connect", lambda dbapi, _record: opened.add(dbapi))

    @property
    def by_transaction(self) -> bool:
        return self.dialect.by_transaction

    @property
    def contiguous(self) -> bool:
        """Whether the capture's ids are contiguous (a missing one is a gap; the head is the
        position a reader resumes at)."""
        return self.dialect.contiguous

    def open(self) -> None:
        """Check every declaration (``DeclarationError``) and install the capture where stale.

        Installs nothing (and takes no lock) when every table's capture is current; with
        ``install="check"``, a stale capture is a ``SourceError`` naming ``db upgrade``.
        """
        rebind(*self._declarations, at_start=True)
        self.upgrade(mode=self.install)

    @property
    def _declarations(self) -> Declarations:
        return self.engine, self.declared, self.bound, self.broken, self.name

    def upgrade(self, *, mode: InstallMode = "auto") -> list[str]:
        """Install the capture where it is stale (``db upgrade``); the tables installed."""
        refuse_pooler_or_replica(self.engine, self._where())
        if not self.bound:
            self.bound = {name: bind(self.engine, name, t) for name, t in self.declared.items()}
        try:
            return ensure_installed(
                lambda: self._connect(write=True),
                self.dialect,
                list(self.bound.values()),
                mode=mode,
                lock_timeout_s=self.lock_timeout_s,
            )
        except CaptureOutdated as exc:
            raise SourceError(f"{self._where()}: {exc}") from None
        except SQLAlchemyError as exc:
            hint = ""
            if "lock timeout" in str(exc):
                hint = (
                    f"; a transaction held a declared table for over {self.lock_timeout_s:g} s."
                    " Retry, or run `invalidation-contracts db upgrade` at a quiet moment"
                )
            raise SourceError(
                f"{self._where()}: cannot install the change capture ({failure_reason(exc)}){hint}"
            ) from exc

    def load(self) -> tuple[dict[str, Snapshot], int]:
        """Every declared table (at its declared initial version), and the capture position."""
        batch = self.read(None, full=True)
        assert batch.contents is not None
        self.set_aside(batch.unreadable, replace=tuple(batch.contents))
        self._loaded = dict(batch.digests)  # what `mark_loaded` vouches for, once registered
        snapshots = {
            name: self.snapshot(name, self.declared[name].version, rows)
            for name, rows in batch.contents.items()
        }
        return snapshots, batch.head

    def snapshot(self, name: str, version: str, rows: Mapping[str, Any]) -> Snapshot:
        try:
            return Snapshot.build(name, version, rows)
        except ProtocolError as exc:
            raise SourceError(f"{self.bound[name].where}: {exc.detail}") from None

    def read(
        self,
        after: int | None,
        *,
        full: bool = False,
        marks: Mapping[str, str] | None = None,
        limit: int | None = None,
        recheck: Mapping[str, frozenset[str]] | None = None,
    ) -> CaptureBatch:
        """The capture records after ``after`` (None: none) and, with ``full``, every table.

        ``marks`` (table → the registry's epoch/version): a table whose digest, computed in the
        database, is the one verified at that mark, and that no record touches, is not read.
        ``limit`` (PostgreSQL): about this many records, whole transactions; when more wait, the
        batch says so (``more``) and no table is read; ``committed`` once the registry holds it.
        ``recheck`` (a survey's candidates): those rows too, once no more records wait.
        """
        if full:  # a reconciliation, or a read after a gap: the declarations checked first
            self._heal()
        try:
            with self._connect() as conn, conn.begin():
                more, backlog = False, None
                if self._consumed is not None:
                    records, more, backlog = self._consumed.read(conn, after, limit)
                    head = self._consumed.position
                else:
                    head = self.dialect.position(conn)
                    records = self.dialect.records(conn, after) if after is not None else []
                if not self.dialect.contiguous:
                    records = current_images(conn, self.dialect, self.bound, records)
                if recheck and not more:
                    return recheck_batch(conn, self.dialect, self.bound, recheck, head, records)
                if not full or more:
                    return CaptureBatch(head, tuple(records), more=more, backlog=backlog)
                contents, unreadable, digests, skipped = read_all(
                    conn, self.dialect, self.bound, records, marks
                )
        except SQLAlchemyError as exc:
            if full and newly_broken(self._declarations):  # a column changed since the check
                return self.read(after, full=True, marks=marks, limit=limit)  # without its table
            raise SourceError(f"{self._where()}: cannot read ({failure_reason(exc)})") from exc
        self._reconciled_at = time.monotonic()
        return CaptureBatch(
            head,
            tuple(records),
            contents,
            tuple(unreadable),
            digests,
            frozenset(skipped),
            undeclared=undeclared(self.bound),
        )

    def committed(self) -> None:
        """The registry now holds what the last ``read`` returned (called under its lock)."""
        if self._consumed is not None:
            self._consumed.committed()

    def _heal(self) -> None:
        """Before reconciling: reinstall triggers a table swap dropped or an operator disabled
        (writes after this are captured; writes before it are in the snapshot read next).
        Bounded as a survey's reads are (``stall_bound``): a hung link fails it, logged."""
        with stall_bound(self.engine) as guard:
            try:
                rebind(*self._declarations)
                self.upgrade(mode=self.install)
            except (SourceError, SQLAlchemyError) as exc:
                why: object = exc
                if guard.broke:
                    why = f"no answer for {guard.bound_s:g} s; its connection was broken"
                logger.error("%s: the change capture is not live: %s", self.name, why)

    def reconcile_due(self) -> bool:
        """Whether the periodic reconciliation is due (``reconcile_interval_s``; None: never),
        or a survey the capture asked for (``survey_soon``)."""
        interval = self.reconcile_interval_s
        if self._distrust:  # asked for: at once, then every RESURVEY_S while one fails
            return time.monotonic() - self._reconciled_at >= RESURVEY_S
        return interval is not None and time.monotonic() - self._reconciled_at >= interval

    def mark_verified(self, marks: Mapping[str, tuple[str, str]]) -> None:
        """Record that each table's digest equals the registry at a mark (epoch/version)."""
        if not marks:
            return
        try:
            with self._connect(write=True) as conn, conn.begin():
                self.dialect.mark_verified(conn, marks)
        except SQLAlchemyError as exc:  # only an optimisation is lost: the next one reads all
            logger.warning(
                "%s: cannot record the verified digests (%s)", self.name, failure_reason(exc)
            )

    def head(self) -> int:
        """The capture's head: a number that moves whenever a record commits (cheap to read)."""
        try:
            with self._connect() as conn, conn.begin():
                return self.dialect.head(conn)
        except SQLAlchemyError as exc:
            raise SourceError(f"{self._where()}: cannot read ({failure_reason(exc)})") from exc

    def drained(self) -> bool:
        """Whether the trigger capture (PostgreSQL) holds no record: every one was consumed and
        trimmed after its registry commit, so a round that finds the head moved has nothing to
        consume (False where unknown: SQLite, logical decoding, which keeps no records table)."""
        if type(self.dialect) is not PostgresCapture:
            return False
        from sqlalchemy import text

        try:
            with self._connect() as conn, conn.begin():
                empty = f"SELECT NOT EXISTS (SELECT 1 FROM {self.dialect.capture})"
                return bool(conn.execute(text(empty)).scalar_one())
        except SQLAlchemyError as exc:
            raise SourceError(f"{self._where()}: cannot read ({failure_reason(exc)})") from exc

    def write(
        self,
        name: str,
        upsert: Mapping[str, Mapping[str, Any]],
        delete: Iterable[str],
        version: str | None,
    ) -> str | None:
        """Write rows of reference table ``name`` into its SQL table, in one transaction
        (``RowWriter.write``); the capture records it like any other writer's."""
        return self.rows.write(self.bound[name], upsert, delete, version)

    def trim(self, upto: int) -> None:
        """Delete the capture records the registry has consumed (up to ``upto``)."""
        from sqlalchemy import text

        try:
            with self._connect(write=True) as conn, conn.begin():
                if self._consumed is None or not self._consumed.trim(conn, upto):
                    conn.execute(text(self.dialect.trim_sql()), {"upto": upto})
        except SQLAlchemyError as exc:
            raise SourceError(
                f"{self._where()}: cannot trim the capture ({failure_reason(exc)})"
            ) from exc

    def listener(self) -> Wakeup | None:
        """PostgreSQL: this worker's bid for the capture's lead, whose holder polls the capture's
        head (``sql.lead.CaptureLead``: writers send no ``NOTIFY``); for a SQLite file, a wake-up on
        its commits (``store.inotify.FileWakeup``, Linux); None where the worker polls it."""
        if self.engine.dialect.name == "sqlite":  # a wake-up on commits to the file (Linux)
            from ..store.inotify import capture_wakeup

            return capture_wakeup(self.engine.url.database)
        if not isinstance(self.dialect, PostgresCapture):
            return None
        from .lead import CaptureLead

        url = self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        return CaptureLead(url, self.dialect.lead, self.dialect.head_sql())

    def change_probe(self) -> CommitProbe | None:
        """For a SQLite database file, a cheap look at whether anyone committed to it
        (``store.sqlite.DataVersion``); None elsewhere (PostgreSQL wakes the worker instead)."""
        if self.engine.dialect.name != "sqlite":
            return None
        from ..store.sqlite import data_version

        return data_version(self.engine.url.database)

    def interrupt(self) -> None:
        """From another thread: make every call waiting on this source's PostgreSQL connections
        fail (a silent link), pooled ones included, so the pool opens fresh ones."""
        if self._opened:
            from ..store.postgres import break_connection

            for connection in list(self._opened):
                break_connection(connection)

    def close(self) -> None:
        if self._owned:
            self.engine.dispose()

    def _connect(self, *, write: bool = False) -> Connection:
        conn = self.engine.connect()
        if self.engine.dialect.name == "sqlite":
            return conn.execution_options(sqlite_begin="IMMEDIATE" if write else "DEFERRED")
        return conn if write else self.dialect.begin_read(conn)

    def _where(self) -> str:
        return self.engine.url.render_as_string(hide_password=True)


def refuse_pooler_or_replica(engine: Engine, where: str) -> None:
    """PostgreSQL: a read replica or a transaction pooler behind ``engine`` is a ``SourceError``
    by name (``store.postgres.session_refusal``), not an unrelated failure later."""
    if engine.dialect.name != "postgresql":
        return
    from ..store.postgres import session_refusal

    try:
        first, second = engine.raw_connection(), engine.raw_connection()
        try:
            refusal = session_refusal(first, second)
        finally:
            second.close()
            first.close()
    except SQLAlchemyError as exc:
        raise SourceError(f"{where}: cannot connect ({failure_reason(exc)})") from None
    if refusal is not None:
        raise SourceError(f"{where} {refusal}")


def read_all(
    conn: Connection,
    dialect: CaptureDialect,
    bound: Mapping[str, BoundTable],
    records: Iterable[Captured],
    marks: Mapping[str, str] | None,
) -> tuple[dict[str, dict[str, Any]], list[QuarantineEntry], dict[str, str], set[str]]:
    """Every declared table's rows, its digest, and the rows set aside; with ``marks``, a table
    whose digest is the one verified at its mark and that no record touches is not read
    (``skipped``)."""
    digests = dialect.digests(conn, list(bound.values()))
    skipped: set[str] = set()
    if marks is not None and digests:
        verified = dialect.verified(conn)
        touched = {record.table for record in records}
        skipped = {
            name
            for name, digest in digests.items()
            if name not in touched and verified.get(name) == (digest, marks.get(name))
        }
    contents, unreadable = read_tables(conn, dialect, bound, skipped)
    return contents, unreadable, digests, skipped


def read_tables(
    conn: Connection, dialect: CaptureDialect, bound: Mapping[str, BoundTable], skip: Iterable[str]
) -> tuple[dict[str, dict[str, Any]], list[QuarantineEntry]]:
    """Every declared table not in ``skip`` (key → row), and the rows the contract cannot carry
    (not JSON, too deep, a NULL key: reported and set aside, never a failed read)."""
    out: dict[str, dict[str, Any]] = {}
    unreadable: list[QuarantineEntry] = []
    skipped = set(skip)
    for name, table in bound.items():
        if name in skipped:
            continue
        rows: dict[str, Any] = {}
        for key, row in conn.exec_driver_sql(dialect.select_sql(table)):
            rendered = key if isinstance(key, str) else str(key)
            try:
                text = rendered = key_text(key)
                value = row_value(row)
                freeze(value, f"{name}[{text!r}]")
            except ProtocolError as exc:
                unreadable.append(QuarantineEntry(name, rendered, f"{table.where}: {exc.detail}"))
                continue
            if text in rows:
                raise SourceError(f"{table.where}: two rows have the key {text!r}")
            rows[text] = value
        out[name] = rows
    return out, unreadable
