"""A logical replication slot's life: created, advanced only to what the registry holds, dropped.

The slot is PostgreSQL's bookmark in the write-ahead log for the logical decoding source
(``logical.LogicalSource``): reads peek it and never consume, ``advance`` moves it once the
registry committed a position, and a slot that vanished or that PostgreSQL invalidated
(``wal_status = lost``) raises ``SlotGone``, so the source creates it again and reconciles.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from ..capture.pgoutput import lsn_text


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

    def ensure(self) -> bool:
        """Create the slot unless it exists and is valid; whether it had to (raises SQLAlchemy's
        errors)."""
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
            conn.execute(
                text("SELECT pg_create_logical_replication_slot(:slot, 'pgoutput')"),
                {"slot": self.name},
            )
        return True

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
