"""The registry's history in PostgreSQL (psycopg 3), shared by every worker on every machine.

The tables live in their own schema (default ``invalidation_contracts``). Writers serialize on a
transaction-level advisory lock of that schema and write at READ COMMITTED (each statement after
the lock sees every earlier commit); readers catch up on REPEATABLE READ snapshots. A commit that
moved the registry sends ``NOTIFY`` on ``<schema>_registry`` so the other workers wake at once.

Every connection a worker opens gives up connecting after ``CONNECT_TIMEOUT_S`` and sends TCP
keepalives (``KEEPALIVES``): over TCP, a peer that vanished without a word fails an idle
connection in about 11 s. A call already waiting on a link that went silent is ended by the
follower's stall bound (``break_connection``, ``worker.follower``), since a relay or proxy that
still acknowledges the bytes it no longer forwards defeats every TCP-level timer.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
from collections.abc import Container, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..._extras import missing

# The SQLite store needs no extra; this module, the PostgreSQL one, needs psycopg.
try:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.rows import TupleRow
except ModuleNotFoundError as exc:
    raise missing(exc, "postgres") from exc

from .base import SQLRegistryStore
from .dialect import Dialect, StorageError
from .highwater import Identity, identity_discontinuity

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from _typeshed import HasFileno
    from psycopg import Pipeline

DEFAULT_SCHEMA = "invalidation_contracts"
SCHEMA_VERSION = "2"
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,40}$")
CONNECT_TIMEOUT_S = 10
"""How long a worker's connection attempt may wait for the server (libpq ``connect_timeout``)."""
KEEPALIVES: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}
"""libpq TCP keepalives of a worker's connections, and how long (ms) bytes it sent may stay
unacknowledged before the connection is dropped (``tcp_user_timeout``; ignored on a Unix socket)."""


def connection_options(url: str) -> dict[str, Any]:
    """The connect timeout and keepalives a worker's connection to ``url`` (a libpq URL or
    conninfo) gets, less those the URL sets itself (a keyword would override them)."""
    return worker_options(conninfo_to_dict(url))


def worker_options(given: Container[str]) -> dict[str, Any]:
    """The connect timeout and keepalives, less the parameters in ``given`` (a URL's own)."""
    wanted = {"connect_timeout": CONNECT_TIMEOUT_S, **KEEPALIVES}
    return {name: value for name, value in wanted.items() if name not in given}


def break_connection(conn: HasFileno) -> None:
    """Shut the socket of a psycopg connection down, from any thread: a call waiting on it fails
    at once with a lost connection, which its owner reopens. Nothing for one already closed."""
    try:
        fd = conn.fileno()
    except Exception:  # noqa: BLE001 - closed or never opened: nothing waits on it
        return
    with contextlib.suppress(OSError), socket.socket(fileno=os.dup(fd)) as sock:
        sock.shutdown(socket.SHUT_RDWR)


def check_schema_name(schema: str) -> str:
    if not _NAME.match(schema):
        raise ValueError(
            f"schema name {schema!r}: use lower-case letters, digits and _ (at most 41 characters)"
        )
    return schema


def redacted(url: str) -> str:
    """``url`` without its password, for messages."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def channel(schema: str, what: str) -> str:
    """The NOTIFY channel of one kind of event of a registry schema."""
    return f"{schema}_{what}"


class PostgresDialect(Dialect[psycopg.Connection[TupleRow]]):
    """PostgreSQL through psycopg 3."""

    errors = (psycopg.Error,)

    def __init__(self, url: str, schema: str = DEFAULT_SCHEMA) -> None:
        self.url = url
        self.schema = check_schema_name(schema)
        self.where = f"{redacted(url)} (schema {schema})"
        self.channel = channel(schema, "registry")

    def connect(self) -> psycopg.Connection[TupleRow]:
        return psycopg.connect(self.url, autocommit=True, **connection_options(self.url))

    def interrupt(self, db: psycopg.Connection[TupleRow]) -> None:
        break_connection(db)

    def usable(self, db: psycopg.Connection[TupleRow]) -> bool:
        return not (db.closed or db.broken)

    def prepare(self, db: psycopg.Connection[TupleRow]) -> None:
        with self.connect() as second:
            refusal = session_refusal(db, second)
        if refusal is not None:
            raise StorageError(f"{self.where} {refusal}")
        if self._prepared(db):  # nothing to create: no wait for the writers' lock
            return
        s = sql.Identifier(self.schema)
        statements = [
            sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(s),
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.meta (name text PRIMARY KEY, value text NOT NULL)"
            ).format(s),
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.tables (name text PRIMARY KEY,"
                " version text NOT NULL, changed_at bigint NOT NULL)"
            ).format(s),
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {s}.rows (table_name text NOT NULL"
                " REFERENCES {s}.tables (name), key text NOT NULL, data text NOT NULL,"
                " PRIMARY KEY (table_name, key))"
            ).format(s=s),
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.rules (from_table text NOT NULL,"
                " to_table text NOT NULL, relation text NOT NULL, via text,"
                " PRIMARY KEY (from_table, to_table, relation))"
            ).format(s),
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.log (seq bigint PRIMARY KEY, record text NOT NULL)"
            ).format(s),
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.positions (source text PRIMARY KEY,"
                " position bigint NOT NULL)"
            ).format(s),
            sql.SQL(
                "INSERT INTO {}.meta (name, value) VALUES ('schema_version', %s)"
                " ON CONFLICT (name) DO NOTHING"
            ).format(s),
        ]
        db.execute("BEGIN")
        try:
            self._lock(db)
            for statement in statements[:-1]:
                db.execute(statement)
            db.execute(statements[-1], (SCHEMA_VERSION,))
            (version,) = _one(
                db.execute(
                    sql.SQL("SELECT value FROM {}.meta WHERE name = 'schema_version'").format(s)
                )
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        if version != SCHEMA_VERSION:
            raise StorageError(
                f"{self.where}: registry schema version {version!r}; this library reads "
                f"version {SCHEMA_VERSION}"
            )

    def _prepared(self, db: psycopg.Connection[TupleRow]) -> bool:
        """Whether every table of this schema version exists (the last one created, and the
        version row written in the same transaction), read without a lock."""
        last = f"{sql.Identifier(self.schema).as_string(db)}.positions"
        (exists,) = _one(db.execute("SELECT to_regclass(%s) IS NOT NULL", (last,)))
        if not exists:
            return False
        row = db.execute(
            sql.SQL("SELECT value FROM {}.meta WHERE name = 'schema_version'").format(
                sql.Identifier(self.schema)
            )
        ).fetchone()
        return row is not None and row[0] == SCHEMA_VERSION

    def begin_write(self, db: psycopg.Connection[TupleRow]) -> None:
        db.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        self._lock(db)

    def begin_read(self, db: psycopg.Connection[TupleRow]) -> None:
        db.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")

    def table(self, name: str) -> str:
        return f'"{self.schema}".{name}'

    def placeholders(self, text: str) -> str:
        return text.replace("?", "%s")

    def batch(self, db: psycopg.Connection[TupleRow]) -> AbstractContextManager[Pipeline]:
        return db.pipeline()

    def committed(self, db: psycopg.Connection[TupleRow], seq: int) -> None:
        db.execute("SELECT pg_notify(%s, %s)", (self.channel, str(seq)))

    def listener(self) -> PostgresListener:
        return PostgresListener(self.url, [self.channel])

    def discontinuity(self, db: psycopg.Connection[TupleRow], epoch: str, seq: int) -> str | None:
        """One query (it runs at every catch-up and write): the identity row, the transaction
        that wrote it, and the cluster now."""
        row = db.execute(
            sql.SQL(
                "SELECT value, xmin::text, (" + _CLUSTER + ") FROM {}.meta WHERE name = 'identity'"
            ).format(sql.Identifier(self.schema))
        ).fetchone()
        if row is None:
            return None
        recorded = Identity.decode(row[0])
        if recorded is None:
            return "the registry's history identity is unreadable"
        return identity_discontinuity(recorded, int(row[1]), str(row[2]), epoch, seq)

    def stamp(self, db: psycopg.Connection[TupleRow], epoch: str, seq: int) -> None:
        cluster, xid = self._identify(db)
        db.execute(
            sql.SQL(
                "INSERT INTO {}.meta (name, value) VALUES ('identity', %s)"
                " ON CONFLICT (name) DO UPDATE SET value = excluded.value"
            ).format(sql.Identifier(self.schema)),
            (Identity(cluster, xid, epoch, seq).encode(),),
        )

    def _identify(self, db: psycopg.Connection[TupleRow]) -> tuple[str, int]:
        """The cluster and this transaction's id (which it assigns: writers only)."""
        xid, cluster = _one(db.execute("SELECT pg_current_xact_id()::text, (" + _CLUSTER + ")"))
        return str(cluster), int(xid)

    @staticmethod
    def _cluster(db: psycopg.Connection[TupleRow]) -> str:
        """The cluster: system identifier / current WAL timeline (no transaction id assigned, so
        a read-only transaction may ask)."""
        (cluster,) = _one(db.execute(_CLUSTER))
        return str(cluster)

    def _lock(self, db: psycopg.Connection[TupleRow]) -> None:
        db.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"ic:{self.schema}",))


def _one(cursor: psycopg.Cursor[TupleRow]) -> TupleRow:
    """The row of a statement that always returns one (a missing one is the store's failure)."""
    row = cursor.fetchone()
    if row is None:
        raise StorageError("the registry store answered a one-row query with no row")
    return row


_CLUSTER = (
    "SELECT system_identifier::text || '/'"
    " || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) FROM pg_control_system()"
)
"""The cluster: system identifier / current WAL timeline (assigns no transaction id)."""


class SessionCursor(Protocol):
    """What ``session_refusal`` asks of a DB-API cursor."""

    def execute(self, query: str) -> object: ...

    def fetchone(self) -> Sequence[object] | None: ...

    def close(self) -> None: ...


class SessionConnection(Protocol):
    """A DB-API connection (psycopg's own, or one SQLAlchemy's pool lends)."""

    def cursor(self) -> SessionCursor: ...

    def commit(self) -> None: ...


def _alone(conn: SessionConnection, statement: str) -> object:
    """``statement``'s one value, in a transaction of its own (none is left open)."""
    cursor = conn.cursor()
    try:
        cursor.execute(statement)
        row = cursor.fetchone()
    finally:
        cursor.close()
    conn.commit()
    return None if row is None else row[0]


def session_refusal(first: SessionConnection, second: SessionConnection) -> str | None:
    """Why a worker cannot use the server behind these two fresh connections of one URL, or None.

    - A read replica (``pg_is_in_recovery``): a worker writes its registry and capture, and a
      standby's state trails its primary's, so it is never a worker's source or store.
    - A transaction (or statement) pooler, such as PgBouncer's ``pool_mode = transaction``: the
      lead's session advisory lock and the wake-ups' ``LISTEN`` need a session of their own. Two
      connections open at once always have two backends on a direct or session-pooled path; a
      transaction pooler hands the second the backend the first just released (its pool is
      last-in first-out), or the first another backend for its next transaction."""
    if _alone(first, "SELECT pg_is_in_recovery()"):
        return "is a read replica (pg_is_in_recovery() is true): point the worker at the primary"
    backend = _alone(first, "SELECT pg_backend_pid()")
    explicit = bool(getattr(second, "autocommit", False))
    cursor = second.cursor()
    try:
        if explicit:
            cursor.execute("BEGIN")
        cursor.execute("SELECT pg_backend_pid()")  # in a transaction: its backend stays pinned
        other = cursor.fetchone()
        again = _alone(first, "SELECT pg_backend_pid()")
    finally:
        if explicit:
            cursor.execute("COMMIT")
        cursor.close()
        second.commit()
    if (other is not None and other[0] == backend) or again != backend:
        return (
            "hands one session several server connections (a transaction pooler, e.g. "
            "PgBouncer's pool_mode = transaction): the capture lead's advisory lock and LISTEN "
            "need a session of their own; connect directly or through pool_mode = session"
        )
    return None


class PostgresRegistryStore(SQLRegistryStore[psycopg.Connection[TupleRow]]):
    """A registry's history in the PostgreSQL database at ``url``, in ``schema``."""

    def __init__(self, url: str, *, schema: str = DEFAULT_SCHEMA) -> None:
        self.url = url
        self.schema = schema
        super().__init__(PostgresDialect(url, schema))


LISTENER_APPLICATION_NAME = "invalidation-contracts-listener"
"""``application_name`` of a worker's wake-up connections (find them in ``pg_stat_activity``)."""


class PostgresListener:
    """A connection that ``LISTEN``s on channels: a worker's wake-up (select on ``fileno``).

    With ``lead`` (a name), it listens only while it holds the session advisory lock of that name:
    one worker at a time consumes a source's capture; the others follow the registry, and one of
    them takes over (``try_lead``) when the leader's connection goes.
    """

    def __init__(
        self,
        url: str,
        channels: list[str],
        *,
        lead: str | None = None,
        session: Mapping[str, str] | None = None,
    ) -> None:
        """``session``: server settings (name → value) for this connection, set before it
        listens or bids (``set_config``; settings the server does not know are skipped)."""
        self._conn = psycopg.connect(
            url,
            autocommit=True,
            application_name=LISTENER_APPLICATION_NAME,
            **connection_options(url),
        )
        self._channels = channels
        self._lead = lead
        self.leader = lead is None
        try:
            self._configure(session or {})
            if self.leader:
                self._listen()
            else:
                self.try_lead()
        except BaseException:
            self._conn.close()
            raise

    def _configure(self, session: Mapping[str, str]) -> None:
        if not session:
            return
        known = {
            row[0]
            for row in self._conn.execute(
                "SELECT name FROM pg_settings WHERE name = ANY(%s)", (list(session),)
            )
        }
        for name, value in session.items():
            if name in known:
                self._conn.execute("SELECT set_config(%s, %s, false)", (name, value))

    def try_lead(self) -> bool:
        """Take the lead if no other worker holds it; True when this listener leads."""
        if not self.leader and self._lead is not None:
            row = self._conn.execute(
                "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (self._lead,)
            ).fetchone()
            if row is not None and row[0]:
                self.leader = True
                self._listen()
        return self.leader

    def _listen(self) -> None:
        for name in self._channels:
            self._conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))

    def fileno(self) -> int:
        return self._conn.fileno()

    def drain(self) -> bool:
        """Consume the notifications that arrived; True if there were any."""
        return bool(list(self._conn.notifies(timeout=0)))

    def interrupt(self) -> None:
        """End a call waiting on this connection (``break_connection``); any thread."""
        break_connection(self._conn)

    def close(self) -> None:
        self._conn.close()
