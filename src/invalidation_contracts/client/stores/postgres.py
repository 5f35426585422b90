"""A store for a fleet: one PostgreSQL database shared by agents on many machines.

Needs the ``postgres`` extra (psycopg 3). Every batch is one transaction. A batch with writes runs
at ``SERIALIZABLE`` isolation and is retried on a serialization failure or a deadlock (a batch is
self-contained: its ``CheckOp`` s carry every assumption it makes, so re-running it is safe); a
read batch runs at ``REPEATABLE READ, READ ONLY``, so its reads see one snapshot.

``version()``: a ``Listener`` (``pg_listen``: one more connection, LISTENing in a daemon thread)
counts the notifications every write batch sends in its own transaction, so the token moves
whenever any process commits and a memory serves from its replica without a round trip while
nothing was — current as of the last notification read, which lags a commit by its delivery
(sub-millisecond at the median on one host); while the listening connection is down the token is
None, and a memory reads the origin's generation (one primary-key read) before it serves. Writes
through any store of this process to the same URL move every such store's token at once. With
``listen=False`` the token is always None: every read makes that round trip and sees every commit
that returned before it, never an entry another machine has evicted once that eviction returned.

The tables are created on first use; ``ic_memory_schema`` records their version, and a database
of another version is refused.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Hashable, Iterable, Sequence
from datetime import UTC, datetime

from ..._extras import missing

try:
    import psycopg
    from psycopg import errors
except ModuleNotFoundError as exc:
    raise missing(exc, "postgres") from exc

from ..shared.store import (
    Op,
    Prepared,
    Result,
    Store,
    StoreConflict,
    StoreError,
    Write,
    encode,
    prepare,
)
from .pg_listen import CHANNEL, Listener
from .sql_items import COLUMNS, SQLItems

SCHEMA_VERSION = 2
"""2: a memory may hold eviction records (``client.shared.moves``) whose entries' rows stay stored,
dead; a library that reads version 1 would serve them, so it refuses a version 2 database. A
version 1 database needs no rewrite: it is marked 2 when this version opens it."""
KIND = "fix memory"
#: ``pg_advisory_xact_lock`` key held while the tables are created ("ICM1").
_SCHEMA_LOCK = 0x49434D31
_DDL = (
    "CREATE TABLE IF NOT EXISTS ic_memory_schema ("
    " kind text PRIMARY KEY, version integer NOT NULL)",
    "CREATE TABLE IF NOT EXISTS ic_memory_items ("
    ' namespace text COLLATE "C" NOT NULL,'
    ' key text COLLATE "C" NOT NULL,'
    " value jsonb NOT NULL,"
    " created_at double precision NOT NULL,"
    " updated_at double precision NOT NULL,"
    " PRIMARY KEY (namespace, key))",
)
_UPSERT = (
    f"INSERT INTO ic_memory_items ({COLUMNS}) VALUES (%s, %s, %s::jsonb, %s, %s) "
    "ON CONFLICT (namespace, key) "
    "DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at"
)
_DELETE = "DELETE FROM ic_memory_items WHERE namespace = %s AND key = %s"
_RETRYABLE = (errors.SerializationFailure, errors.DeadlockDetected)
#: Write batches committed by this process's stores, by URL: part of every listening store's
#: token, so a write moves the tokens of the process's other stores of that database at once.
_LOCAL_WRITES: dict[str, int] = {}
_LOCAL_LOCK = threading.Lock()


class PostgresStore(Store):
    """A store in one PostgreSQL database; safe to share between threads, processes, machines.

    ``url``: a libpq connection string or URI. ``retries``: how many times a write batch is run
    again after a serialization failure before the store gives up with ``StoreError``.
    ``listen``: keep a LISTEN connection for ``version()`` (``pg_listen``, the default), so a
    memory's reads make no round trip while nothing was committed; with ``listen=False`` every
    read of a memory makes one round trip first and sees every commit that returned before it.
    """

    def __init__(
        self, url: str, *, connect_timeout: int = 10, retries: int = 100, listen: bool = True
    ) -> None:
        if retries < 1:
            raise ValueError("retries must be at least 1")
        self._listener: Listener | None = None
        self._url = url
        try:
            self._conn = psycopg.connect(url, autocommit=True, connect_timeout=connect_timeout)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to the PostgreSQL fix memory: {exc}") from exc
        self._items = SQLItems("ic_memory_items", "%s", self._conn.execute)
        self._lock = threading.Lock()
        self._retries = retries
        self._closed = False
        try:
            self._ensure_schema()
        except BaseException:
            self._conn.close()
            raise
        if listen:
            self._listener = Listener(url, connect_timeout=connect_timeout)

    @property
    def listener(self) -> Listener | None:
        """The LISTEN connection behind ``version()`` (None with ``listen=False``)."""
        return self._listener

    def version(self) -> Hashable | None:
        """Moves on every commit of any process, while the LISTEN connection is up with
        nothing unread; None otherwise (a memory then asks the database)."""
        if self._listener is None:
            return None
        token = self._listener.token()
        return None if token is None else (token, _LOCAL_WRITES.get(self._url, 0))

    def _ensure_schema(self) -> None:
        try:
            with self._conn.transaction():
                self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                for statement in _DDL:
                    self._conn.execute(statement)
                row = self._conn.execute(
                    "SELECT version FROM ic_memory_schema WHERE kind = %s", (KIND,)
                ).fetchone()
                if row is None:
                    self._conn.execute(
                        "INSERT INTO ic_memory_schema (kind, version) VALUES (%s, %s)",
                        (KIND, SCHEMA_VERSION),
                    )
                elif row[0] == 1:
                    self._conn.execute(
                        "UPDATE ic_memory_schema SET version = %s WHERE kind = %s",
                        (SCHEMA_VERSION, KIND),
                    )
                elif row[0] != SCHEMA_VERSION:
                    raise StoreError(
                        f"the PostgreSQL fix memory has schema version {row[0]}; "
                        f"this library reads {SCHEMA_VERSION}"
                    )
        except psycopg.Error as exc:
            raise StoreError(f"cannot prepare the PostgreSQL fix memory: {exc}") from exc

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        prepared = [prepare(op) for op in ops]
        writes = any(isinstance(op, Write) for op in prepared)
        isolation = "SERIALIZABLE" if writes else "REPEATABLE READ, READ ONLY"
        with self._lock:
            if self._closed:
                raise StoreError("the PostgreSQL fix memory is closed")
            for attempt in range(self._retries):
                try:
                    with self._conn.transaction():
                        self._conn.execute(f"SET TRANSACTION ISOLATION LEVEL {isolation}")
                        results = self._run_all(prepared)
                        if writes:  # delivered on commit only: every replica re-checks
                            self._conn.execute("SELECT pg_notify(%s, '')", (CHANNEL,))
                    if writes:
                        with _LOCAL_LOCK:
                            _LOCAL_WRITES[self._url] = _LOCAL_WRITES.get(self._url, 0) + 1
                    return results
                except _RETRYABLE:
                    time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 10)))
                except StoreConflict:
                    raise
                except psycopg.Error as exc:
                    raise StoreError(f"the PostgreSQL fix memory: {exc}") from exc
        raise StoreError(
            f"the PostgreSQL fix memory: {self._retries} serialization failures in a row"
        )

    def _run_all(self, ops: Sequence[Prepared]) -> list[Result]:
        """Run ops in order; consecutive writes go to the server as one pipelined batch."""
        results: list[Result] = []
        puts: list[Write] = []
        for op in ops:
            if isinstance(op, Write):
                puts.append(op)
                continue
            if puts:
                self._put(puts)
                results += [None] * len(puts)
                puts = []
            results.append(self._items.read(op))
        if puts:
            self._put(puts)
            results += [None] * len(puts)
        return results

    def _put(self, puts: Sequence[Write]) -> None:
        now = datetime.now(UTC).timestamp()
        with self._conn.cursor() as cursor:
            for delete, group in _runs(puts):
                if delete:
                    cursor.executemany(_DELETE, [(encode(p.namespace), p.key) for p in group])
                else:
                    cursor.executemany(
                        _UPSERT, [(encode(p.namespace), p.key, p.text, now, now) for p in group]
                    )

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()


def _runs(puts: Sequence[Write]) -> list[tuple[bool, list[Write]]]:
    """Consecutive writes grouped into runs of deletes and runs of upserts, in order."""
    out: list[tuple[bool, list[Write]]] = []
    for put in puts:
        delete = put.text is None
        if out and out[-1][0] == delete:
            out[-1][1].append(put)
        else:
            out.append((delete, [put]))
    return out
