"""SQLAlchemy engines for a provider's database, with transactions that mean what they say.

PostgreSQL URLs use psycopg 3 (``postgresql://`` becomes ``postgresql+psycopg://``), with the
workers' connect timeout and TCP keepalives (``store.postgres``) unless the URL's query or
``connect_args`` set them. SQLite connections run in autocommit mode and every SQLAlchemy
transaction emits its own ``BEGIN`` (``DEFERRED`` by default, ``IMMEDIATE`` with the
``sqlite_begin`` execution option), so a read transaction is one consistent snapshot — the
Python driver's implicit transactions are not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine, make_url

from ..._extras import require_extra

if TYPE_CHECKING:
    import sqlite3

    from sqlalchemy.pool import ConnectionPoolEntry

DEFAULT_BUSY_TIMEOUT_S = 30.0


def database_url(url: str | URL) -> URL:
    """``url`` with the driver this library uses for its dialect."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def make_engine(url: str | URL, **options: Any) -> Engine:
    """An engine for the provider's database at ``url``."""
    parsed = database_url(url)
    if parsed.get_backend_name() == "postgresql":
        require_extra("postgres", "psycopg")
        from ..store.postgres import worker_options

        connect_args = options.setdefault("connect_args", {})
        for name, value in worker_options(parsed.query).items():  # the URL's own stand
            connect_args.setdefault(name, value)
    if parsed.get_backend_name() == "sqlite":
        options.setdefault("connect_args", {}).setdefault("timeout", DEFAULT_BUSY_TIMEOUT_S)
    engine = sa.create_engine(parsed, **options)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_autocommit)
        event.listen(engine, "begin", _sqlite_begin)
    return engine


def _sqlite_autocommit(dbapi_connection: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
    dbapi_connection.isolation_level = None


def _sqlite_begin(conn: Connection) -> None:
    mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
    conn.exec_driver_sql(f"BEGIN {mode}")


def failure_reason(exc: sa.exc.SQLAlchemyError) -> str:
    """The first line of what the database said (the driver's error), for a one-line message."""
    original = getattr(exc, "orig", None)
    text = str(original if original is not None else exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
