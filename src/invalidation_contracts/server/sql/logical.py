"""PostgreSQL logical decoding as a change source: no trigger and no NOTIFY on a writer's path.

``LogicalSource`` reads the declared tables' changes from a logical replication slot with the
built-in ``pgoutput`` plugin, through the SQL slot functions
(``pg_logical_slot_peek_binary_changes`` on an ordinary connection; the bytes are decoded by
``capture.pgoutput``). A publication limits the decoding to the declared tables. The slot's
lifecycle:

- created at open (and at a read that finds it gone);
- peeked, never consumed by the read: it advances (``pg_replication_slot_advance``) only to a
  position the registry has committed (at the next read, under the registry's lock, and at
  ``trim`` after the commit), so a worker killed between the read and the commit loses nothing;
- lost (dropped, or invalidated by ``max_slot_wal_keep_size``): created again, and the read
  carries every table in full with ``CaptureBatch.lost``, so the registry reconciles: never a
  silent gap.

Each decoded change names a row's key; its image is read again from the table in the reader's
snapshot (``rewrite.current_images``, as the trigger capture's PostgreSQL records are). A decoded
transaction not yet visible in that snapshot (its commit logged, not yet visible) stops the batch
before it, and the batch is read again. The position (a ``pg_lsn`` as an integer) is the WAL
flushed when the snapshot was taken: every transaction committed before it was decoded.

Its start and periodic reconciliation are a survey (``sql.survey``), as the trigger capture's:
the survey compares rows with the registry, not positions, so the slot's positions (LSNs, not
record ids) do not matter to it; the candidates are read again in the snapshot the slot's changes'
images are read in, under the registry's lock. A lost slot still reads every table in that
snapshot when a full read was asked for; else (a running worker) its new slot's changes are
consumed and a survey that trusts no verified digest is due at once (``Surveyed.survey_soon``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Mapping

from sqlalchemy import text
from sqlalchemy.engine import URL, Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from ..._extras import missing
from ..capture.pgoutput import VERSION_PREFIX, XID_SPAN, Declared, decode, lsn_text, visible
from ..capture.records import CaptureBatch, Captured
from ..capture.source import Wakeup
from ..capture.steps import SourceError
from ..domain import SQLTable
from .capture import DEFAULT_CAPTURE_SCHEMA, PostgresCapture, literal
from .declare import BoundTable, undeclared
from .engine import failure_reason
from .install import DEFAULT_LOCK_TIMEOUT_S, InstallMode
from .rewrite import current_images
from .slot import ReplicationSlot, SlotGone
from .source import DEFAULT_BATCH_RECORDS, DEFAULT_RECONCILE_INTERVAL_S, SQLSource, read_all
from .survey import recheck_batch
from .upsert import RowWriter

try:  # logical decoding reads PostgreSQL only: its driver is this module's extra
    import psycopg  # noqa: F401
except ModuleNotFoundError as exc:
    raise missing(exc, "postgres") from exc

logger = logging.getLogger(__name__)


class LogicalCapture(PostgresCapture):
    """The SQL of a logical decoding capture: a publication of the declared tables, the slot,
    and no trigger (those a trigger capture installed are dropped)."""

    def __init__(self, engine: Engine, schema: str, slot: str, publication: str) -> None:
        super().__init__(engine, schema)
        self.slot = slot
        self.publication = publication
        self.lead = f"ic-ingest:{schema}_logical"

    def install_base(self, conn: Connection) -> None:
        s = self._quote(self.schema)
        conn.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {s}")
        self._install_ledgers(conn)
        if not conn.execute(
            text("SELECT count(*) FROM pg_publication WHERE pubname = :p"), {"p": self.publication}
        ).scalar_one():
            conn.exec_driver_sql(f"CREATE PUBLICATION {self._quote(self.publication)}")

    def table_ddl(self, table: BoundTable) -> list[str]:
        target = self.qualified(table)
        publication = self._quote(self.publication)
        identity = "FULL" if table.sql.key_columns else "DEFAULT"
        published = (
            "SELECT 1 FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid"
            f" WHERE p.pubname = {literal(self.publication)}"
            f" AND r.prrelid = {literal(target)}::regclass"
        )
        statements = [
            f"DROP TRIGGER IF EXISTS ic_capture ON {target}",
            f"DROP TRIGGER IF EXISTS ic_capture_truncate ON {target}",
            # The declared key must be in every change's old image: a key that is not the
            # primary key is only there when the whole old row is logged.
            f"ALTER TABLE {target} REPLICA IDENTITY {identity}",
            f"DO $ic$ BEGIN IF NOT EXISTS ({published}) THEN"
            f" ALTER PUBLICATION {publication} ADD TABLE {target}; END IF; END $ic$",
        ]
        return statements

    def triggers_live(self, conn: Connection, table: BoundTable) -> bool:
        """Whether ``table`` is published (a swapped table is not): its changes are decoded."""
        return bool(
            conn.execute(
                text(
                    "SELECT count(*) FROM pg_publication_rel r JOIN pg_publication p"
                    " ON p.oid = r.prpubid WHERE p.pubname = :p AND r.prrelid = to_regclass(:t)"
                ),
                {"p": self.publication, "t": self.qualified(table)},
            ).scalar_one()
        )

    def record_version(self, conn: Connection, table: str, version: str) -> None:
        """A transactional logical message naming the table's next version."""
        conn.execute(
            text("SELECT pg_logical_emit_message(true, :prefix, :content)"),
            {"prefix": VERSION_PREFIX, "content": json.dumps({"table": table, "version": version})},
        )

    def transaction_id(self, conn: Connection) -> str | None:
        """The 32-bit xid decoding names the transaction by."""
        row = conn.exec_driver_sql("SELECT pg_current_xact_id()::text::bigint").scalar_one()
        return str(int(row) % XID_SPAN)

    def head_sql(self) -> str:
        # Moves whenever WAL is flushed: the leader then peeks the slot (a read that consumes
        # nothing relevant writes nothing to the registry, so the registry's own commits settle).
        return "SELECT (pg_current_wal_flush_lsn() - '0/0')::bigint"


class LogicalSource(SQLSource):
    """The declared tables of one PostgreSQL database, captured by logical decoding."""

    def __init__(
        self,
        database: str | URL | Engine,
        tables: Mapping[str, SQLTable],
        *,
        slot: str | None = None,
        publication: str | None = None,
        capture_schema: str = DEFAULT_CAPTURE_SCHEMA,
        name: str = "sql",
        install: InstallMode = "auto",
        lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
        reconcile_interval_s: float | None = DEFAULT_RECONCILE_INTERVAL_S,
        batch_records: int = DEFAULT_BATCH_RECORDS,
    ) -> None:
        """``slot``, ``publication``: their names (default: derived from the database and the
        capture schema; a slot's name is unique in the cluster). Other options as ``SQLSource``."""
        super().__init__(
            database,
            tables,
            name=name,
            capture_schema=capture_schema,
            install=install,
            lock_timeout_s=lock_timeout_s,
            reconcile_interval_s=reconcile_interval_s,
            batch_records=batch_records,
        )
        if self.engine.dialect.name != "postgresql":
            raise ValueError("logical decoding needs PostgreSQL, not " + self.engine.dialect.name)
        default = hashlib.sha256(
            f"{self.engine.url.database}/{capture_schema}".encode()
        ).hexdigest()[:16]
        self.dialect = LogicalCapture(
            self.engine, capture_schema, slot or f"ic_{default}", publication or "ic_capture"
        )
        self.rows = RowWriter(self.engine, self.dialect, self._connect)
        self._consumed = None
        self._slot = ReplicationSlot(self.engine, self._logical.slot)
        self._slot_ready = False

    @property
    def slot(self) -> str:
        return self._slot.name

    @property
    def _logical(self) -> LogicalCapture:
        assert isinstance(self.dialect, LogicalCapture)
        return self.dialect

    def open(self) -> None:
        """Check ``wal_level``, the declarations, publish the tables, create the slot."""
        try:
            with self.engine.connect() as conn:
                level = conn.exec_driver_sql("SHOW wal_level").scalar_one()
        except SQLAlchemyError as exc:
            raise SourceError(f"{self._where()}: cannot read ({failure_reason(exc)})") from exc
        if level != "logical":
            raise SourceError(
                f"{self._where()}: wal_level is {level!r}; logical decoding needs wal_level ="
                " logical (ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL), or use"
                " the trigger capture (SQLSource)"
            )
        super().open()
        self._ensure_slot()

    def read(
        self,
        after: int | None,
        *,
        full: bool = False,
        marks: Mapping[str, str] | None = None,
        limit: int | None = None,
        recheck: Mapping[str, frozenset[str]] | None = None,
    ) -> CaptureBatch:
        """The slot's changes committed after ``after`` (up to about ``limit``, whole
        transactions) and, with ``full`` or a lost slot, every table in the same snapshot;
        ``recheck``: a survey's candidates too, read again in that snapshot (``sql.survey``)."""
        if full and marks is not None:
            self._heal()
        try:
            return self._read(
                after, full=full, marks=marks, limit=limit, lost=None, recheck=recheck
            )
        except SlotGone:
            lost = self._ensure_slot()
        try:
            if lost is not None and not full and after is not None:
                # what no slot decoded is found by a survey beside the worker (trusting no
                # verified digest), not by reading every table under the registry's lock
                self.survey_soon(lost)
                return self._read(after, full=False, marks=None, limit=limit, lost=None)
            return self._read(after, full=True, marks=marks, limit=limit, lost=lost)
        except SlotGone:
            raise SourceError(f"{self._where()}: the slot {self.slot!r} keeps vanishing") from None

    def _read(
        self,
        after: int | None,
        *,
        full: bool,
        marks: Mapping[str, str] | None,
        limit: int | None,
        lost: str | None,
        recheck: Mapping[str, frozenset[str]] | None = None,
    ) -> CaptureBatch:
        try:
            with self._connect() as conn, conn.begin():
                head, records, more = self._changes(conn, after, limit)
                records = current_images(conn, self.dialect, self.bound, records)
                if recheck and not more and not full and lost is None:
                    # the candidates' rows in the snapshot the records' images were read in
                    return recheck_batch(conn, self._logical, self.bound, recheck, head, records)
                if not full or more:
                    return CaptureBatch(head, tuple(records), more=more, lost=lost)
                # a lost slot trusts no verified digest: every table is read
                trusted = marks if lost is None else None
                contents, unreadable, digests, skipped = read_all(
                    conn, self.dialect, self.bound, records, trusted
                )
        except SQLAlchemyError as exc:
            raise SourceError(f"{self._where()}: cannot read ({failure_reason(exc)})") from exc
        self._reconciled_at = time.monotonic()
        return CaptureBatch(
            head,
            tuple(records),
            contents,
            tuple(unreadable),
            digests,
            frozenset(skipped),
            lost=lost,
            undeclared=undeclared(self.bound),
        )

    def _changes(
        self, conn: Connection, after: int | None, limit: int | None
    ) -> tuple[int, list[Captured], bool]:
        """In ``conn``'s snapshot: the position reached, the decoded records, whether more wait."""
        upto, xmax, xip = conn.exec_driver_sql(
            "SELECT (pg_current_wal_flush_lsn() - '0/0')::bigint,"
            " pg_snapshot_xmax(s)::text::bigint,"
            " ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(s) AS x)"
            " FROM pg_current_snapshot() AS s"
        ).one()
        confirmed = self._advance(conn, after)
        base = max(after or 0, confirmed)
        if int(upto) <= confirmed:
            # Nothing flushed past the slot's position (the registry holds everything before
            # it): no decoding session, the read's dearest part, for a quiet database.
            return (base if after is None else after), [], False
        rows = conn.execute(
            text(
                "SELECT (lsn - '0/0')::bigint, data FROM pg_logical_slot_peek_binary_changes("
                ":slot, CAST(:upto AS pg_lsn), CAST(:n AS int), 'proto_version', '1',"
                " 'publication_names', :pub, 'messages', 'true')"
            ),
            {
                "slot": self.slot,
                "upto": lsn_text(int(upto)),
                "n": limit,
                "pub": self._logical.publication,
            },
        ).all()
        declared = {
            (t.sql.schema or "public", t.sql.table): Declared(name, tuple(c.name for c in t.key))
            for name, t in self.bound.items()
        }
        records, commits = decode(declared, [(int(lsn), bytes(data)) for lsn, data in rows])
        seen = visible(commits, int(xmax), {int(x) for x in xip})
        more = limit is not None and len(rows) >= limit
        if len(seen) < len(commits):
            # A commit flushed but not yet visible in this snapshot (its transaction ended after
            # it was taken): stop before it and read again (a commit visible after it may have
            # ended before this round began, so the round waits for it).
            kept = {str(c.xid) for c in seen}
            records = [r for r in records if r.tx in kept]
            return (seen[-1].end_lsn if seen else base), records, True
        if more:
            return (commits[-1].end_lsn if commits else base), records, True
        if not records and after is not None:
            self._advance(conn, int(upto))  # nothing to consume up to here: skip it for good
            return after, records, False
        return max(base, int(upto)), records, False

    def _advance(self, conn: Connection, position: int | None) -> int:
        return self._slot.advance(conn, position)

    def _ensure_slot(self) -> str | None:
        """Create the slot if it does not exist (or was invalidated); why, when it had to."""
        try:
            created = self._slot.ensure()
        except SQLAlchemyError as exc:
            raise SourceError(
                f"{self._where()}: cannot create the replication slot {self.slot!r}"
                f" ({failure_reason(exc)})"
            ) from exc
        reason = None
        if created and self._slot_ready:
            reason = f"the replication slot {self.slot!r} was lost and created again"
            logger.warning("%s: %s; reconciling every table", self.name, reason)
        self._slot_ready = True
        return reason

    def trim(self, upto: int) -> None:
        """Advance the slot to ``upto``, which the registry has committed (another worker
        holding the slot at this moment: the next read advances it)."""
        try:
            with self._connect(write=True) as conn, conn.begin():
                self._advance(conn, upto)
        except SlotGone:
            return  # the next read creates it again and reconciles
        except SQLAlchemyError as exc:
            if "is active for PID" not in str(exc):
                raise SourceError(
                    f"{self._where()}: cannot advance the slot ({failure_reason(exc)})"
                ) from exc

    def committed(self) -> None:
        """Nothing: the slot advances once the registry's position is committed (``trim``)."""

    def listener(self) -> Wakeup | None:
        """This worker's bid for the capture's lead; the leader looks at the flushed WAL."""
        from .lead import CaptureLead

        url = self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        return CaptureLead(url, self._logical.lead, self._logical.head_sql())

    def drop_slot(self) -> None:
        """Drop the slot (retiring this source: a slot keeps WAL until it is dropped)."""
        self._slot.drop()
