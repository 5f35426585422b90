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
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

from .capture import CaptureDialect
from .declare import BoundTable

if TYPE_CHECKING:
    from sqlalchemy import Connection

logger = logging.getLogger(__name__)

InstallMode = Literal["auto", "check"]
DEFAULT_LOCK_TIMEOUT_S = 5.0
"""How long installing the capture on one table may wait for its lock (PostgreSQL)."""


class CaptureOutdated(RuntimeError):
    """The capture is not installed at this release's schema version (``mode="check"``)."""


def stale_tables(
    connect: Callable[[], Connection], dialect: CaptureDialect, tables: Sequence[BoundTable]
) -> list[BoundTable]:
    """The declared tables whose capture is missing, out of date or not firing (reads only)."""
    with connect() as conn, conn.begin():
        if not dialect.has_base(conn):
            return list(tables)
        return [table for table in tables if not dialect.current(conn, table)]


def ensure_installed(
    connect: Callable[[], Connection],
    dialect: CaptureDialect,
    tables: Sequence[BoundTable],
    *,
    mode: InstallMode = "auto",
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
) -> list[str]:
    """Install the capture where it is stale; the reference tables (re)installed, in order."""
    stale = stale_tables(connect, dialect, tables)
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
            if dialect.current(conn, table):
                continue  # another worker got there first
            dialect.install_table(conn, table)
            done.append(table.name)
    if done:
        logger.warning("installed the change capture on %s", ", ".join(done))
    return done
