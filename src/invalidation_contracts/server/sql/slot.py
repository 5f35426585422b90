"""A logical replication slot's life: created, advanced only to what the registry holds, dropped.

The slot is PostgreSQL's bookmark in the write-ahead log for the logical decoding source
(``logical.LogicalSource``): reads peek it and never consume, ``advance`` moves it once the
registry committed a position, and a slot that vanished or that PostgreSQL invalidated
(``wal_status = lost``) raises ``SlotGone``, so the source creates it again and reconciles.

Creating a slot waits until every transaction that held a transaction id when it began has
ended (PostgreSQL builds the slot's first snapshot then), anywhere in the cluster: a session idle
in a transaction in another database holds a worker's first start. The wait is not cut short (the
slot cannot exist sooner), but it is said: every ``SLOT_WAIT_REPORT_S`` the creation is cancelled
(nothing is left behind), the transactions it waits for are logged by pid, database, state and
age, and it starts again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import OperationalError

from ..capture.pgoutput import lsn_text

logger = logging.getLogger(__name__)

SLOT_WAIT_REPORT_S = 10.0
"""How long a slot's creation waits before it names the transactions it waits for, and again."""
QUERY_CANCELED = "57014"
BLOCKERS = (
    "SELECT pid, coalesce(datname, ''), coalesce(state, ''),"
    " extract(epoch FROM clock_timestamp() - xact_start)::float"
    " FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()"
    " ORDER BY xact_start LIMIT 5"
)


class SlotGone(Exception):
    """The slot does not exist, or PostgreSQL invalidated it: what it held is lost."""


@dataclass(frozen=True)
class ReplicationSlot:
    """One pgoutput slot of ``engine``'s database, by ``name`` (unique in the cluster)."""

    engine: Engine
    name: str

    def advance(self, conn: Connection, position: int | None) -> int:
        """Move the slot to ``position`` (a position the registry holds, or one with nothing to
        consume before it) if it is behind; the slot's confirmed position."""
        row = conn.execute(
            text(
                "SELECT (confirmed_flush_lsn - '0/0')::bigint, coalesce(wal_status, '')"
                " FROM pg_replication_slots WHERE slot_name = :slot"
            ),
            {"slot": self.name},
        ).first()
        if row is None or row[1] == "lost":
            raise SlotGone
        confirmed = int(row[0]) if row[0] is not None else 0
        if position is not None and position > confirmed:
            conn.execute(
                text("SELECT pg_replication_slot_advance(:slot, CAST(:to AS pg_lsn))"),
                {"slot": self.name, "to": lsn_text(position)},
            )
            return position
        return confirmed

    def ensure(self, report_every_s: float = SLOT_WAIT_REPORT_S) -> bool:
        """Create the slot unless it exists and is valid; whether it had to (raises SQLAlchemy's
        errors). A creation that waits says what for every ``report_every_s``."""
        with self.engine.connect() as conn:
            conn = conn.execution_options(isolation_level="AUTOCOMMIT")
            row = conn.execute(
                text(
                    "SELECT coalesce(wal_status, '') FROM pg_replication_slots"
                    " WHERE slot_name = :slot"
                ),
                {"slot": self.name},
            ).first()
            if row is not None and row[0] != "lost":
                return False
            if row is not None:
                conn.execute(text("SELECT pg_drop_replication_slot(:s)"), {"s": self.name})
            self._create(conn, report_every_s)
        return True

    def _create(self, conn: Connection, report_every_s: float) -> None:
        """Create the slot; each ``report_every_s`` it still waits, log what it waits for."""
        timeout = f"{max(1, int(report_every_s * 1000))}ms"
        conn.execute(text("SELECT set_config('statement_timeout', :t, false)"), {"t": timeout})
        try:
            while True:
                try:
                    conn.execute(
                        text("SELECT pg_create_logical_replication_slot(:slot, 'pgoutput')"),
                        {"slot": self.name},
                    )
                    return
                except OperationalError as exc:
                    if getattr(exc.orig, "sqlstate", None) != QUERY_CANCELED:
                        raise
                    self._report_wait(conn)
        finally:
            conn.execute(text("RESET statement_timeout"))  # the session's own default

    def _report_wait(self, conn: Connection) -> None:
        waits = conn.execute(text(BLOCKERS)).all()
        named = "; ".join(  # state and age are hidden from a role without pg_read_all_stats
            f"pid {pid} in database {db!r}"
            + (f", {state or 'active'} for {age:.0f} s" if age is not None else "")
            for pid, db, state, age in waits
        )
        logger.warning(
            "creating the replication slot %r waits for the transactions that held an id when it"
            " began to end (PostgreSQL builds its snapshot then): %s",
            self.name,
            named or "none left; trying again",
        )

    def drop(self) -> None:
        """Drop the slot (retiring the source: a slot keeps WAL until it is dropped)."""
        with self.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(
                text(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                    " WHERE slot_name = :slot"
                ),
                {"slot": self.name},
            )
