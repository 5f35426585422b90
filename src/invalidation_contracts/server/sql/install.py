"""Installing the change capture once per schema version, not on every worker start.

Each declared table's triggers are identified by a digest of their SQL (and the capture format);
``<schema>.installed`` (SQLite ``ic_installed``) records the digest installed. A worker that finds
every table current — digest equal, triggers present and firing — takes no lock and changes
nothing. Otherwise (first start, a new release, a changed declaration, a dropped or disabled
trigger) it installs what is stale, one table per short transaction, under an advisory lock
(PostgreSQL) and a ``lock_timeout``: a long transaction on a declared table makes the start fail
with a clear error instead of queueing every other writer behind it. ``mode="check"`` never
installs: a stale capture is an error telling the operator to run ``invalidation-contracts db
upgrade`` (the same code, run once by a deploy step).

Versions side by side: every digest an install replaces is recorded as superseded
(``<schema>.superseded``, SQLite ``ic_superseded``). A worker whose capture is superseded (an old
worker of a rolling deploy, or one respawned after ``db upgrade``) keeps the newer capture rather
than reverting it; only ``db upgrade`` (``mode="upgrade"``) puts an older release's back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

from sqlalchemy import text

from .capture import CaptureDialect
from .declare import BoundTable

if TYPE_CHECKING:
    from sqlalchemy import Connection

logger = logging.getLogger(__name__)

InstallMode = Literal["auto", "check", "upgrade"]
DEFAULT_LOCK_TIMEOUT_S = 5.0
"""How long installing the capture on one table may wait for its lock (PostgreSQL)."""


class CaptureOutdated(RuntimeError):
    """The capture is not installed at this release's schema version (``mode="check"``)."""


def stale_tables(
    connect: Callable[[], Connection],
    dialect: CaptureDialect,
    tables: Sequence[BoundTable],
    *,
    newer_wins: bool = True,
) -> list[BoundTable]:
    """The declared tables whose capture is missing, out of date or not firing (reads only);
    with ``newer_wins``, not one whose live capture a later install put over this one's."""
    with connect() as conn, conn.begin():
        if not dialect.has_base(conn):
            return list(tables)
        stale = [table for table in tables if not dialect.current(conn, table)]
        if not newer_wins:
            return stale
        newer = [table for table in stale if superseded(conn, dialect, table)]
    if newer:
        logger.warning(
            "a newer change capture than this worker's is installed on %s (a later release or "
            "`db upgrade`); kept (after a rollback, run `invalidation-contracts db upgrade` with "
            "this release to install its capture)",
            ", ".join(t.where for t in newer),
        )
    return [table for table in stale if table not in newer]


def superseded_table(dialect: CaptureDialect) -> str:
    """Per declared SQL table, every digest a later install replaced (beside ``installed``)."""
    return dialect.installed_table[: -len("installed")] + "superseded"


def superseded(conn: Connection, dialect: CaptureDialect, table: BoundTable) -> bool:
    """Whether ``table``'s capture as this worker declares it was replaced by a later install
    (a newer release's, or ``db upgrade``'s) whose triggers still fire."""
    where = superseded_table(dialect)
    if not dialect.has_table(conn, where):
        return False
    row = conn.execute(
        text(f"SELECT 1 FROM {where} WHERE table_name = :t AND digest = :d"),
        {"t": dialect.qualified(table), "d": dialect.digest(table)},
    ).first()
    return row is not None and dialect.triggers_live(conn, table)


def install(conn: Connection, dialect: CaptureDialect, table: BoundTable) -> None:
    """Install ``table``'s capture, recording the digest it replaces as superseded (and this
    one as no longer superseded), in ``conn``'s transaction."""
    where = superseded_table(dialect)
    names = {"t": dialect.qualified(table), "d": dialect.digest(table)}
    conn.exec_driver_sql(
        f"CREATE TABLE IF NOT EXISTS {where} (table_name TEXT NOT NULL,"
        " digest TEXT NOT NULL, PRIMARY KEY (table_name, digest))"
    )
    conn.execute(
        text(
            f"INSERT INTO {where} (table_name, digest) SELECT table_name, digest"
            f" FROM {dialect.installed_table} WHERE table_name = :t AND digest <> :d"
            " ON CONFLICT DO NOTHING"
        ),
        names,
    )
    conn.execute(text(f"DELETE FROM {where} WHERE table_name = :t AND digest = :d"), names)
    dialect.install_table(conn, table)


def ensure_installed(
    connect: Callable[[], Connection],
    dialect: CaptureDialect,
    tables: Sequence[BoundTable],
    *,
    mode: InstallMode = "auto",
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> list[str]:
    """Install the capture where it is stale; the reference tables (re)installed, in order.

    A worker (``auto``, ``check``) never puts its capture over a newer one; ``upgrade`` (the
    ``db upgrade`` command) installs this release's wherever it differs."""
    stale = stale_tables(connect, dialect, tables, newer_wins=mode != "upgrade")
    if not stale:
        return []
    if mode == "check":
        names = ", ".join(t.where for t in stale)
        raise CaptureOutdated(
            f"the change capture of {names} is missing or out of date; run "
            "`invalidation-contracts db upgrade` (or open with install='auto')"
        )
    with connect() as conn, conn.begin():
        dialect.lock(conn, lock_timeout_s)
        dialect.install_base(conn)
    done = []
    for table in stale:
        with connect() as conn, conn.begin():
            dialect.lock(conn, lock_timeout_s)
            if dialect.current(conn, table) or (
                mode != "upgrade" and superseded(conn, dialect, table)
            ):
                continue  # another worker got there first, or a newer release did
            install(conn, dialect, table)
            done.append(table.name)
    if done:
        logger.warning("installed the change capture on %s", ", ".join(done))
    return done
