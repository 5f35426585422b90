"""Quarantine: captured records and table rows the contract cannot carry, kept aside and reported.

A row image the contract cannot carry (a NULL key, an integer beyond ±(2^53−1), a value with no JSON
form) can only reach the capture from before the triggers refused it (an upgrade) or by a write
around them. It must neither take every route down nor block a worker's start: the record is set
aside in ``<schema>.quarantine`` (SQLite ``ic_quarantine``), logged, and listed for the admin routes
and readiness; the registry keeps the row's last carried image (or its absence) until a write
makes the row carriable again, which clears the entry.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from ..capture.records import QuarantineEntry
from ..capture.steps import SourceError
from .engine import failure_reason

logger = logging.getLogger(__name__)

#: Most entries kept (the oldest go first); a flood of bad rows must not grow a table unbounded.
MAX_ENTRIES = 10_000


class QuarantineTable:
    """The quarantine table of one capture schema."""

    def __init__(self, name: str) -> None:
        self.name = name

    def create_sql(self) -> str:
        return (
            f"CREATE TABLE IF NOT EXISTS {self.name} (table_name TEXT NOT NULL, key TEXT NOT NULL,"
            " capture_id BIGINT, reason TEXT NOT NULL, PRIMARY KEY (table_name, key))"
        )

    def add(self, conn: Connection, entries: Iterable[QuarantineEntry]) -> None:
        rows = [
            {"t": e.table, "k": e.key, "i": e.capture_id, "r": e.reason[:2000]} for e in entries
        ]
        if not rows:
            return
        conn.execute(
            text(
                f"INSERT INTO {self.name} (table_name, key, capture_id, reason)"
                " VALUES (:t, :k, :i, :r) ON CONFLICT (table_name, key)"
                " DO UPDATE SET capture_id = excluded.capture_id, reason = excluded.reason"
            ),
            rows,
        )
        for row in rows:
            logger.error(
                "capture: %s[%r] cannot be carried (%s); quarantined, serving its last carried"
                " image until a write fixes the row",
                row["t"],
                row["k"],
                row["r"],
            )
        (count,) = conn.execute(text(f"SELECT count(*) FROM {self.name}")).one()
        if count > MAX_ENTRIES:
            conn.execute(
                text(
                    f"DELETE FROM {self.name} WHERE (table_name, key) IN (SELECT table_name, key"
                    f" FROM {self.name} ORDER BY capture_id NULLS FIRST LIMIT :n)"
                ),
                {"n": count - MAX_ENTRIES},
            )

    def clear(self, conn: Connection, pairs: Iterable[tuple[str, str]]) -> None:
        rows = [{"t": t, "k": k} for t, k in pairs]
        if rows:
            conn.execute(text(f"DELETE FROM {self.name} WHERE table_name = :t AND key = :k"), rows)

    def clear_tables(self, conn: Connection, tables: Iterable[str]) -> None:
        rows = [{"t": t} for t in tables]
        if rows:
            conn.execute(text(f"DELETE FROM {self.name} WHERE table_name = :t"), rows)

    def entries(self, conn: Connection) -> list[QuarantineEntry]:
        result = conn.execute(
            text(
                f"SELECT table_name, key, reason, capture_id FROM {self.name}"
                " ORDER BY table_name, key"
            )
        )
        return [QuarantineEntry(t, k, r, None if i is None else int(i)) for t, k, r, i in result]


class _HasQuarantine(Protocol):
    @property
    def quarantine(self) -> QuarantineTable: ...


class Quarantining:
    """``SQLSource``'s quarantine: setting entries aside, releasing them, listing them."""

    dialect: _HasQuarantine

    def set_aside(self, entries: Iterable[QuarantineEntry], *, replace: Iterable[str] = ()) -> None:
        """Quarantine ``entries``; ``replace``: tables read in full (these are all there is)."""
        entries, replace = list(entries), list(replace)
        if not entries and not replace:
            return
        try:
            with self._connect(write=True) as conn, conn.begin():
                if replace:
                    self.dialect.quarantine.clear_tables(conn, replace)
                self.dialect.quarantine.add(conn, entries)
        except SQLAlchemyError as exc:
            raise SourceError(
                f"{self._where()}: cannot quarantine ({failure_reason(exc)})"
            ) from exc

    def release(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Clear the quarantine of rows (table, key) a carriable write has replaced."""
        pairs = list(pairs)
        if not pairs:
            return
        try:
            with self._connect(write=True) as conn, conn.begin():
                self.dialect.quarantine.clear(conn, pairs)
        except SQLAlchemyError as exc:
            raise SourceError(
                f"{self._where()}: cannot quarantine ({failure_reason(exc)})"
            ) from exc

    def quarantined(self) -> list[QuarantineEntry]:
        """What the contract could not carry and set aside (for the admin routes and readiness)."""
        try:
            with self._connect() as conn, conn.begin():
                return self.dialect.quarantine.entries(conn)
        except SQLAlchemyError as exc:
            raise SourceError(f"{self._where()}: cannot read ({failure_reason(exc)})") from exc

    def _connect(self, *, write: bool = False) -> Connection:
        raise NotImplementedError

    def _where(self) -> str:
        raise NotImplementedError
