"""Client scores shared by every worker of one registry (issue 42): any worker scores any client.

At ``serve --workers N`` a client's requests reach any worker (a load balancer, or no keep-alive),
and a retry is a retry, a taught fix stays taught, whichever worker answers. So each client's
scoring state (its figures, its refusal streaks, the fixes it was taught) lives beside the
registry's history, and each policy check folds into it in one write transaction before the
answer goes out (``ClientScores.fold`` is the fold; this module only keeps the rows):

- SQLite: a file of its own beside the registry file (``<registry>-clients``, WAL, synchronous
  NORMAL: a score is telemetry, and a per-request commit on the registry file would wake every
  worker's follower and fsync), ``BEGIN IMMEDIATE`` per fold;
- PostgreSQL: the table ``client_scores`` in the registry's schema, one advisory transaction lock.

Bounded, with a floor a key-minting flood cannot push real clients below: a new key is a
*newcomer*, kept in a pool of at most ``max_newcomers`` (the least recently seen leaves when
full); from its ``ADMIT``-th request (a repeat client) it is *kept*, among at most
``max_clients``; when that pool is full it takes the place of the least busy kept client only if
that one sent no more requests than it (counted up to ``BUSY_CAP``), else it waits as a newcomer.
So keys that send one request each never reach the kept pool, and keys that each send ``n``
requests push out only kept clients that sent at most ``n``. A client that leaves adds its
figures to the ``*forgotten`` row: the totals never lose a request.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, Protocol

from ..server.domain import Route
from ..server.policies import Finding
from ..server.state import RegistryState
from ..server.store.dialect import Cursor
from .scoring import BUSY_CAP, DEFAULT_MAX_CLIENTS, ClientFigures, ClientScores

ADMIT = 2
"""Requests after which a client key is kept (a repeat client), not a newcomer."""
DEFAULT_MAX_NEWCOMERS = 1_000
FORGOTTEN = "*forgotten"
"""The row summing the figures of every client that left (no client key has this form)."""
SCOPE = "registry"
"""The ``worker`` label of the shared figures: every worker reports the same registry-wide rows."""
READ_KEEP_S = 0.2
"""How long a read of the shared figures is reused (a collection reads several at once)."""
FIGURES = ("requests", "episodes", "first_try", "retries", "stale_values_sent", "refused")
_COLUMNS = ", ".join(FIGURES)


class _Database(Protocol):
    """What the rows need from a database: one write transaction, statements, a close."""

    def transaction(self) -> AbstractContextManager[None]: ...

    def run(self, sql: str, params: Sequence[Any] = ()) -> Cursor: ...

    def close(self) -> None: ...


class _SQLite:
    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.table = "ic_client_scores"

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def run(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        return self.db.execute(sql.format(t=self.table), tuple(params))

    def close(self) -> None:
        self.db.close()


class _Postgres:
    def __init__(self, url: str, schema: str) -> None:
        import psycopg

        from ..server.store.postgres import check_schema_name, connection_options

        self.db = psycopg.connect(url, autocommit=True, **connection_options(url))
        self.table = f'"{check_schema_name(schema)}".client_scores'

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self.db.execute("BEGIN")
        try:
            self.db.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.table,))
            yield
        except BaseException:
            if not self.db.broken:
                self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def run(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        return self.db.execute(sql.format(t=self.table).replace("?", "%s"), tuple(params))

    def close(self) -> None:
        self.db.close()


def _create(db: _Database, real: str) -> None:
    with db.transaction():
        db.run(
            "CREATE TABLE IF NOT EXISTS {t} (client TEXT PRIMARY KEY, kept INTEGER NOT NULL,"
            f" busy INTEGER NOT NULL, seen {real} NOT NULL,"
            + "".join(f" {name} BIGINT NOT NULL," for name in FIGURES)
            + " state TEXT NOT NULL)"
        )
        db.run("CREATE INDEX IF NOT EXISTS ic_client_scores_pool ON {t} (kept, busy, seen)")


class SharedScores:
    """Every client's figures, kept in the registry's database (see the module docstring).

    The same reads as ``ClientScores`` (``totals``, ``figures``, ``busiest``, ``snapshot``,
    ``forgotten``, ``len``), each a query: the figures of every worker."""

    scope: str | None = SCOPE

    def __init__(
        self,
        target: str,
        *,
        schema: str | None = None,
        fold: ClientScores | None = None,
        max_clients: int = DEFAULT_MAX_CLIENTS,
        max_newcomers: int = DEFAULT_MAX_NEWCOMERS,
    ) -> None:
        """``target``: the registry's SQLite path or ``postgresql://`` URL (``schema``: its
        schema); ``fold``: the fold's settings (attempts per episode, fixes per client)."""
        from ..server.store import is_postgres_url

        if max_clients < 1 or max_newcomers < 1:
            raise ValueError("max_clients and max_newcomers must be at least 1")
        self.max_clients = max_clients
        self.max_newcomers = max_newcomers
        self._fold = fold if fold is not None else ClientScores()
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._kept: dict[tuple[str, tuple[Any, ...]], tuple[float, list[Any]]] = {}
        if is_postgres_url(target):
            from ..server.store.postgres import DEFAULT_SCHEMA

            url, name = target, schema or DEFAULT_SCHEMA
            self._db: _Database = _Postgres(url, name)
            _create(self._db, "DOUBLE PRECISION")
            self._reader: _Database = _Postgres(url, name)
        else:
            path = str(Path(target)) + "-clients"
            self._db = _SQLite(path)
            _create(self._db, "REAL")
            self._reader = _SQLite(path)

    def checked(
        self,
        client: str,
        route: Route[Any],
        request: Mapping[str, Any],
        state: RegistryState,
        findings: tuple[Finding, ...],
        document: bytes | None = None,
    ) -> None:
        """Fold one request of ``client`` into its shared row (``ClientScores.checked``)."""
        with self._lock, self._db.transaction():
            row = self._db.run(
                f"SELECT kept, busy, {_COLUMNS}, state FROM {{t}} WHERE client = ?", (client,)
            ).fetchone()
            if row is None:
                kept, busy, figures, data = 0, 0, ClientFigures(), None
                self._make_room(0, self.max_newcomers)
            else:
                kept, busy = int(row[0]), int(row[1])
                figures = ClientFigures(**dict(zip(FIGURES, map(int, row[2:-1]), strict=True)))
                data = json.loads(row[-1])
            data = self._fold.fold(data, figures, route, request, state, findings, document)
            busy = min(busy + 1, BUSY_CAP)
            if not kept and busy >= ADMIT:
                kept = 1 if self._make_room(1, self.max_clients, busy) else 0
            self._put(client, kept, busy, figures, data)

    def _make_room(self, pool: int, capacity: int, busy: int | None = None) -> bool:
        """Whether ``pool`` (0 newcomers, 1 kept) has room for one more, made by letting its
        least recently seen newcomer go, or its least busy kept client when that one sent at
        most ``busy`` requests."""
        (count,) = self._db.run("SELECT count(*) FROM {t} WHERE kept = ?", (pool,)).fetchone()
        if int(count) < capacity:
            return True
        order = "seen" if pool == 0 else "busy, seen"
        least = self._db.run(
            f"SELECT client, busy FROM {{t}} WHERE kept = ? ORDER BY {order} LIMIT 1", (pool,)
        ).fetchone()
        if least is None or (busy is not None and int(least[1]) > busy):
            return False
        self._forget(str(least[0]))
        return True

    def _forget(self, client: str) -> None:
        row = self._db.run(f"SELECT {_COLUMNS} FROM {{t}} WHERE client = ?", (client,)).fetchone()
        self._db.run("DELETE FROM {t} WHERE client = ?", (client,))
        left = self._db.run(
            f"SELECT busy, {_COLUMNS} FROM {{t}} WHERE client = ?", (FORGOTTEN,)
        ).fetchone() or (0,) * (len(FIGURES) + 1)
        sums = [int(a) + int(b) for a, b in zip(left[1:], row, strict=True)]
        figures = ClientFigures(**dict(zip(FIGURES, sums, strict=True)))
        self._put(FORGOTTEN, -1, int(left[0]) + 1, figures, None)

    def _put(self, client: str, kept: int, busy: int, figures: ClientFigures, data: object) -> None:
        values = [getattr(figures, name) for name in FIGURES]
        self._db.run(
            f"INSERT INTO {{t}} (client, kept, busy, seen, {_COLUMNS}, state)"
            f" VALUES (?, ?, ?, ?, {', '.join('?' * len(FIGURES))}, ?)"
            " ON CONFLICT (client) DO UPDATE SET kept = excluded.kept, busy = excluded.busy,"
            " seen = excluded.seen, "
            + ", ".join(f"{name} = excluded.{name}" for name in FIGURES)
            + ", state = excluded.state",
            (client, kept, busy, time.time(), *values, json.dumps(data, separators=(",", ":"))),
        )

    # -- reads (the metrics, the operator page) ---------------------------------------------------

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """A read on a connection of its own (never behind a fold waiting for the write lock),
        kept for ``READ_KEEP_S``: one collection reads each figure, not one query per figure."""
        now = time.monotonic()
        key = (sql, tuple(params))
        with self._read_lock:
            kept = self._kept.get(key)
            if kept is not None and now - kept[0] < READ_KEEP_S:
                return kept[1]
            rows = list(self._reader.run(sql, params).fetchall())
            if len(self._kept) > 64:
                self._kept.clear()
            self._kept[key] = (now, rows)
            return rows

    def totals(self) -> ClientFigures:
        """Every client's figures summed, the forgotten ones included."""
        sums = self._rows(f"SELECT {', '.join(f'sum({n})' for n in FIGURES)} FROM {{t}}")[0]
        return ClientFigures(**{n: int(v or 0) for n, v in zip(FIGURES, sums, strict=True)})

    def figures(self, client: str) -> ClientFigures | None:
        rows = self._rows(f"SELECT {_COLUMNS} FROM {{t}} WHERE client = ?", (client,))
        return None if not rows or client == FORGOTTEN else _figures(rows[0])

    def busiest(self, n: int) -> list[tuple[str, ClientFigures]]:
        """The ``n`` clients with the most requests (ties: by key), with their figures."""
        rows = self._rows(
            f"SELECT client, {_COLUMNS} FROM {{t}} WHERE kept >= 0"
            " ORDER BY requests DESC, client LIMIT ?",
            (n,),
        )
        return [(str(row[0]), _figures(row[1:])) for row in rows]

    def snapshot(self) -> dict[str, ClientFigures]:
        rows = self._rows(f"SELECT client, {_COLUMNS} FROM {{t}} WHERE kept >= 0")
        return {str(row[0]): _figures(row[1:]) for row in rows}

    def __len__(self) -> int:
        """Clients kept now (newcomers included)."""
        return int(self._rows("SELECT count(*) FROM {t} WHERE kept >= 0")[0][0])

    @property
    def forgotten(self) -> int:
        """Clients that left to make room (their figures stay in the totals)."""
        rows = self._rows("SELECT busy FROM {t} WHERE client = ?", (FORGOTTEN,))
        return int(rows[0][0]) if rows else 0

    def close(self) -> None:
        with self._lock:
            self._db.close()
        with self._read_lock:
            self._reader.close()


def _figures(values: Sequence[Any]) -> ClientFigures:
    return ClientFigures(**dict(zip(FIGURES, (int(v) for v in values), strict=True)))
