"""The reconciliation's reads on PostgreSQL, outside the registry's lock (``capture.survey``).

``survey`` reads, in one read-only snapshot with a ``lock_timeout``, each declared table's digest
and, for a table not verified at the registry's version, its rows through a server-side cursor in
chunks of ``SURVEY_CHUNK``, compared as they arrive. ``reread`` reads a survey's candidates again
inside the consumer's own snapshot (under the lock), in a savepoint with a short ``lock_timeout``:
a migration holding a table's ACCESS EXCLUSIVE lock postpones the recheck, never the consumer.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import event, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError, SQLAlchemyError

from ...protocol.problems import ProtocolError
from ..capture.records import CaptureBatch, Captured, QuarantineEntry, key_text, row_value
from ..capture.steps import SourceError
from ..capture.survey import Survey, TableSurvey
from ..tables import Snapshot, freeze
from .capture import CaptureDialect, PostgresCapture
from .declare import BoundTable, undeclared
from .engine import failure_reason
from .quarantine import Quarantining

if TYPE_CHECKING:
    from ..state import RegistryState

logger = logging.getLogger(__name__)
SURVEY_CHUNK = 10_000
"""Rows fetched per round trip of a survey's cursor (and between two ``progress`` calls)."""
SURVEY_LOCK_TIMEOUT_S = 30.0
"""How long a survey waits for a table's lock (a migration's ACCESS EXCLUSIVE) before it gives up
until the next interval: it waits beside the worker, which serves on."""
SURVEY_STALL_S = 60.0
"""How long a survey's read may go without an answer (no chunk, no digest) before its connection
is broken from outside: a link that acknowledges but never answers (no FIN, no RST, keepalives
answered by a proxy) fails the survey, which is logged, instead of holding every later one. Above
``SURVEY_LOCK_TIMEOUT_S``: a lock waited for answers (an error) within it."""
RESURVEY_S = 5.0
"""How soon a survey the capture asked for (``survey_soon``) is tried again after one failed."""
RECHECK_LOCK_TIMEOUT_S = 0.5
"""How long the recheck under the registry's lock waits for a table's lock before it is
postponed to the next round (the records are consumed meanwhile)."""
_INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")


def survey(
    conn: Connection,
    dialect: CaptureDialect,
    bound: Mapping[str, BoundTable],
    tables: Mapping[str, Snapshot],
    marks: Mapping[str, str],
    progress: Callable[[int], None] | None = None,
    *,
    trusted: bool = True,
) -> Survey:
    """Compare every declared table in ``tables`` (the registry's, at ``marks``) with the
    database, in ``conn``'s one snapshot (a read-only transaction the caller began); with
    ``trusted`` False, a table verified at its mark is read all the same."""
    if isinstance(dialect, PostgresCapture):
        conn.exec_driver_sql(f"SET LOCAL lock_timeout = '{int(SURVEY_LOCK_TIMEOUT_S * 1000)}ms'")
    declared = [bound[name] for name in tables if name in bound]
    digests = dialect.digests(conn, declared)
    verified = dialect.verified(conn) if trusted else {}
    if progress is not None:
        progress(0)
    candidates: dict[str, frozenset[str]] = {}
    equal: dict[str, tuple[str, str]] = {}
    aside: list[QuarantineEntry] = []
    read = 0
    for table in declared:
        name, mark, digest = table.name, marks[table.name], digests.get(table.name)
        if digest is not None and verified.get(name) == (digest, mark):
            continue
        compared = TableSurvey(tables[name], kept=frozenset(c.name for c in table.others))
        cursor = conn.execution_options(stream_results=True, max_row_buffer=SURVEY_CHUNK)
        for chunk in cursor.exec_driver_sql(dialect.select_sql(table)).partitions(SURVEY_CHUNK):
            rows: list[tuple[str, Any]] = []
            for rendered, row in chunk:
                key = rendered if isinstance(rendered, str) else str(rendered)
                try:
                    key = key_text(rendered)
                    rows.append((key, row_value(row)))
                except ProtocolError as exc:  # as ``read_tables`` names it, for the quarantine
                    compared.unreadable += 1
                    aside.append(QuarantineEntry(name, key, f"{table.where}: {exc.detail}"))
            compared.feed(rows)
            read += len(chunk)
            if progress is not None:
                progress(read)
        aside.extend(
            QuarantineEntry(name, key, f"{table.where}: {why}") for key, why in compared.aside
        )
        if compared.equal and digest is not None:
            equal[name] = (digest, mark)
        if compared.candidates():
            candidates[name] = compared.candidates()
    return Survey(candidates, equal, read, tuple(aside))


def reread(
    conn: Connection,
    dialect: CaptureDialect,
    bound: Mapping[str, BoundTable],
    candidates: Mapping[str, frozenset[str]],
) -> tuple[dict[str, dict[str, Any]], list[QuarantineEntry]] | None:
    """The candidates' rows now (table → key → row) and those the contract cannot carry, in
    ``conn``'s snapshot; None when a table's lock was not granted in time (postponed)."""
    rows: dict[str, dict[str, Any]] = {}
    unreadable: list[QuarantineEntry] = []
    if not isinstance(dialect, PostgresCapture):  # SQLite: a reader waits for no lock
        _reread(conn, dialect, bound, candidates, rows, unreadable)
        return rows, unreadable
    try:
        with conn.begin_nested():
            conn.exec_driver_sql(
                f"SET LOCAL lock_timeout = '{int(RECHECK_LOCK_TIMEOUT_S * 1000)}ms'"
            )
            _reread(conn, dialect, bound, candidates, rows, unreadable)
            conn.exec_driver_sql("SET LOCAL lock_timeout = DEFAULT")
    except OperationalError as exc:
        if "lock timeout" not in str(exc):
            raise
        return None
    return rows, unreadable


def _reread(
    conn: Connection,
    dialect: CaptureDialect,
    bound: Mapping[str, BoundTable],
    candidates: Mapping[str, frozenset[str]],
    rows: dict[str, dict[str, Any]],
    unreadable: list[QuarantineEntry],
) -> None:
    """``reread``'s reads: each table's candidates by key, into ``rows`` and ``unreadable``."""
    for name, keys in candidates.items():
        table = bound.get(name)
        if table is None:
            continue
        found: dict[str, Any] = {}
        arrays = list(_key_arrays(keys, len(table.key)))
        given: dict[str, object] = {"keys": arrays}
        if not isinstance(dialect, PostgresCapture):  # one JSON array of the arrays
            given = {"keys": "[" + ",".join(arrays) + "]"}
        for rendered, row in conn.execute(text(_keyed_sql(conn, dialect, table)), given):
            key = str(rendered)
            try:
                key = key_text(rendered)
                value = row_value(row)
                freeze(value, f"{name}[{key!r}]")
            except ProtocolError as exc:
                unreadable.append(QuarantineEntry(name, key, f"{table.where}: {exc.detail}"))
                continue
            found[key] = value
        rows[name] = found


class Surveyed(Quarantining):
    """``SQLSource``'s survey: its periodic reconciliation beside the worker (PostgreSQL)."""

    dialect: CaptureDialect
    bound: dict[str, BoundTable]
    _reconciled_at: float
    _loaded: dict[str, str]
    _distrust: bool = False
    name: str

    @property
    def surveys(self) -> bool:
        """Whether the start's and periodic reconciliation is a survey (else a full read under
        the lock): PostgreSQL (digests in the database) and SQLite (every row read beside the
        worker, compared in Python)."""
        return True

    def survey(self, tables: Mapping[str, Snapshot], marks: Mapping[str, str]) -> Survey:
        """Compare the tables with the registry's ``tables`` at ``marks`` outside its lock."""
        self._reconciled_at = time.monotonic()  # the interval starts again
        distrust = self._distrust
        self._heal()
        found = run_survey(
            self._connect, self.dialect, self.bound, tables, marks, self._where(), not distrust
        )
        self._distrust = False
        self.set_aside(found.unreadable)  # a bypass wrote what the capture would have refused
        return found

    def survey_soon(self, why: str) -> None:
        """The capture cannot vouch for what it missed (a gap, a lost replication slot): the
        next survey is due at once and reads every table, trusting no verified digest."""
        self._distrust = True
        self._reconciled_at = float("-inf")
        logger.warning("%s: %s; every table is surveyed beside the worker", self.name, why)

    def mark_loaded(self, state: RegistryState) -> None:
        """After ``load`` initialised a registry now at ``state``: the digests read in the load's
        snapshot are the registry's tables at their versions (verified: the start's survey reads
        nothing). Only once, and only for the tables still at the version loaded."""
        loaded, self._loaded = self._loaded, {}
        marks = {
            name: (digest, f"{state.epoch}/{state.tables[name].version}")
            for name, digest in loaded.items()
            if name in state.tables and state.changed_at.get(name, 0) == 0
        }
        self.mark_verified(marks)

    def mark_verified(self, marks: Mapping[str, tuple[str, str]]) -> None:
        raise NotImplementedError

    def _heal(self) -> None:
        raise NotImplementedError


def run_survey(
    connect: Callable[[], Connection],
    dialect: CaptureDialect,
    bound: Mapping[str, BoundTable],
    tables: Mapping[str, Snapshot],
    marks: Mapping[str, str],
    where: str,
    trusted: bool = True,
) -> Survey:
    """``survey`` in a read-only transaction of its own on ``connect()`` (a read snapshot),
    its connection broken when no answer comes for ``SURVEY_STALL_S`` (``StallGuard``);
    ``trusted``: whether a table verified at its mark may be skipped."""
    guard: StallGuard | None = None
    try:
        with connect() as conn:
            guard = StallGuard(conn, SURVEY_STALL_S)
            with guard, conn.begin():
                if isinstance(dialect, PostgresCapture):
                    conn.exec_driver_sql("SET TRANSACTION READ ONLY")
                return survey(conn, dialect, bound, tables, marks, guard.turn, trusted=trusted)
    except SQLAlchemyError as exc:
        reason = failure_reason(exc)
        if guard is not None and guard.broke:
            reason = f"no answer for {guard.bound_s:g} s; its connection was broken"
        raise SourceError(f"{where}: cannot survey ({reason})") from exc


class StallGuard:
    """Breaks ``conn``'s socket from a thread of its own when ``turn`` was not called for
    ``bound_s`` seconds while the block runs: a read that hangs on a silent link fails.
    With ``engine`` (and no ``conn``): every connection this thread checks out of it in the
    block (``stall_bound``)."""

    def __init__(
        self, conn: Connection | None, bound_s: float, *, engine: Engine | None = None
    ) -> None:
        self.bound_s = bound_s
        self.broke = False
        self._dbapis: list[object] = []
        if conn is not None and conn.connection.dbapi_connection is not None:
            self._dbapis.append(conn.connection.dbapi_connection)
        self._engine = engine
        self._owner = threading.get_ident()
        self._last = time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, name="invalidation-contracts-survey-guard", daemon=True
        )

    def turn(self, _read: int = 0) -> None:
        """An answer came (a chunk, the digests): the bound starts again."""
        self._last = time.monotonic()

    def __enter__(self) -> StallGuard:
        if self._engine is not None:
            event.listen(self._engine, "checkout", self._checked_out)
        self._last = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._engine is not None:
            event.remove(self._engine, "checkout", self._checked_out)
        self._done.set()
        self._thread.join()

    def _checked_out(self, dbapi: object, _record: object, _proxy: object) -> None:
        if threading.get_ident() == self._owner:
            self._dbapis.append(dbapi)

    def _watch(self) -> None:
        from ..store.postgres import break_connection

        while not self._done.wait(min(1.0, self.bound_s / 4)):
            if time.monotonic() - self._last > self.bound_s and self._dbapis:
                self.broke = True
                for dbapi in list(self._dbapis):
                    break_connection(dbapi)  # type: ignore[arg-type]
                return


def stall_bound(engine: Engine) -> StallGuard:
    """A ``StallGuard`` over the connections the calling thread checks out of ``engine`` in the
    block, at ``SURVEY_STALL_S``: a reconciliation's other steps (``_heal``: the declarations
    checked, the capture reinstalled) hang no longer than its reads."""
    return StallGuard(None, SURVEY_STALL_S, engine=engine)


def recheck_batch(
    conn: Connection,
    dialect: CaptureDialect,
    bound: Mapping[str, BoundTable],
    recheck: Mapping[str, frozenset[str]],
    head: int,
    records: Iterable[Captured],
) -> CaptureBatch:
    """The records read, with ``recheck``'s rows read again in the same snapshot (``reread``)."""
    again = reread(conn, dialect, bound, recheck)
    rows, aside = again if again is not None else (None, [])
    return CaptureBatch(
        head,
        tuple(records),
        rechecked=rows,
        recheck_unreadable=tuple(aside),
        undeclared=undeclared(bound),
    )


def _keyed_sql(conn: Connection, dialect: CaptureDialect, table: BoundTable) -> str:
    """``select_sql`` of the rows whose key, as a JSON array, is one of ``:keys`` (PostgreSQL:
    text[]; SQLite: one JSON array of them, its key columns compared value by value)."""
    quote = conn.dialect.identifier_preparer.quote
    refs = ", ".join(f"t.{quote(c.name)}" for c in table.key)
    if not isinstance(dialect, PostgresCapture):
        parts = ", ".join(f"json_extract(k.value, '$[{i}]')" for i in range(len(table.key)))
        keyed = f"({refs}) IN (SELECT {parts} FROM json_each(:keys) AS k)"
        return f"{dialect.select_sql(table)} WHERE {keyed}"
    return (
        f"{dialect.select_sql(table)}"
        f" WHERE jsonb_build_array({refs}) = ANY(CAST(:keys AS text[])::jsonb[])"
    )


def _key_arrays(keys: Iterable[str], columns: int) -> Iterable[str]:
    """Each key text as the JSON array of its key columns (both readings of an integer-looking
    single key: the column may be text or an integer)."""
    for key in keys:
        if columns > 1:
            yield key
            continue
        yield json.dumps([key])
        if _INTEGER.fullmatch(key):
            yield f"[{key}]"
