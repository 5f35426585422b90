"""The rows of the client scores every worker of one registry shares (``observe.shared``): the
per-client figures and fold state, the written events waiting to be folded, the pools' bounds.

SQLite: a file of its own in a folder beside the registry file (``<registry>-clients/
scores.sqlite``, WAL, synchronous NORMAL: a score is telemetry; its own folder, as every write
in the registry's folder wakes every worker's follower); PostgreSQL: the tables
``client_scores`` and ``client_events`` in the registry's schema, one advisory transaction lock
per write. Writes go through ``writing()`` (one transaction, behind this process's lock); reads
use a connection of their own, so a figure is never read behind a fold.
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

from ..server.store.dialect import Cursor
from .scoring import ClientFigures

FORGOTTEN = "*forgotten"
"""The row that sums the figures of the clients that left to make room."""
FOLDED = "*folded"
"""The row whose ``seen`` is when a worker last folded."""
READ_KEEP_S = 0.2
"""How long a read's rows are reused (one collection reads each figure once)."""
FIGURES = ("requests", "episodes", "first_try", "retries", "stale_values_sent", "refused")
_COLUMNS = ", ".join(FIGURES)


class _Database(Protocol):
    """What the rows need from a database: one write transaction, statements, a close."""

    def transaction(self) -> AbstractContextManager[None]: ...

    def run(self, sql: str, params: Sequence[Any] = ()) -> Cursor: ...

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...

    def close(self) -> None: ...


class _SQLite:
    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.table = "ic_client_scores"
        self.events = "ic_client_events"

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
        return self.db.execute(sql.format(t=self.table, e=self.events), tuple(params))

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.db.executemany(sql.format(t=self.table, e=self.events), rows)

    def close(self) -> None:
        self.db.close()


class _Postgres:
    def __init__(self, url: str, schema: str) -> None:
        import psycopg

        from ..server.store.postgres import check_schema_name, connection_options

        self.db = psycopg.connect(url, autocommit=True, **connection_options(url))
        name = check_schema_name(schema)
        self.table = f'"{name}".client_scores'
        self.events = f'"{name}".client_events'

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
        return self.db.execute(self._sql(sql), tuple(params))

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self.db.cursor() as cursor:
            cursor.executemany(self._sql(sql), rows)

    def _sql(self, sql: str) -> str:
        return sql.format(t=self.table, e=self.events).replace("?", "%s")

    def close(self) -> None:
        self.db.close()


def _create(db: _Database, real: str, events: str) -> None:
    with db.transaction():
        db.run(
            "CREATE TABLE IF NOT EXISTS {t} (client TEXT PRIMARY KEY, kept INTEGER NOT NULL,"
            f" busy INTEGER NOT NULL, seen {real} NOT NULL,"
            + "".join(f" {name} BIGINT NOT NULL," for name in FIGURES)
            + " state TEXT NOT NULL)"
        )
        db.run("CREATE INDEX IF NOT EXISTS ic_client_scores_pool ON {t} (kept, busy, seen)")
        db.run(
            "CREATE TABLE IF NOT EXISTS {e} (id " + events + ", at BIGINT NOT NULL,"
            " client TEXT NOT NULL, event TEXT NOT NULL)"
        )
        db.run("CREATE INDEX IF NOT EXISTS ic_client_events_at ON {e} (at)")


class ScoreStore:
    """The shared rows at ``target`` (the registry's SQLite path or ``postgresql://`` URL, its
    ``schema``): written in ``writing()`` transactions, read on a connection of their own."""

    def __init__(self, target: str, *, schema: str | None = None) -> None:
        from ..server.store import is_postgres_url

        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._kept: dict[tuple[str, tuple[Any, ...]], tuple[float, list[Any]]] = {}
        if is_postgres_url(target):
            from ..server.store.postgres import DEFAULT_SCHEMA

            url, name = target, schema or DEFAULT_SCHEMA
            self._db: _Database = _Postgres(url, name)
            _create(self._db, "DOUBLE PRECISION", "BIGSERIAL PRIMARY KEY")
            self._reader: _Database = _Postgres(url, name)
        else:
            folder = Path(str(Path(target)) + "-clients")
            folder.mkdir(exist_ok=True)
            path = str(folder / "scores.sqlite")
            self._db = _SQLite(path)
            _create(self._db, "REAL", "INTEGER PRIMARY KEY")
            self._reader = _SQLite(path)

    @contextmanager
    def writing(self) -> Iterator[None]:
        """One write transaction (this process's writers one at a time)."""
        with self._lock, self._db.transaction():
            yield

    # -- in a ``writing()`` transaction ------------------------------------------------------------

    def add_events(self, rows: Sequence[tuple[int, str, str]]) -> None:
        """Write events ``(at, client, event)``."""
        self._db.many("INSERT INTO {e} (at, client, event) VALUES (?, ?, ?)", rows)

    def last_fold(self) -> float | None:
        """When a worker last folded (seconds since the epoch), None before the first fold."""
        row = self._db.run("SELECT seen FROM {t} WHERE client = ?", (FOLDED,)).fetchone()
        return None if row is None else float(row[0])

    def events(self, before: int | None) -> list[tuple[int, int, str, str]]:
        """The written events ``(id, at, client, event)`` in time order, those ``at`` before
        ``before`` (nanoseconds) or all of them."""
        if before is None:
            rows = self._db.run("SELECT id, at, client, event FROM {e} ORDER BY at, id")
        else:
            rows = self._db.run(
                "SELECT id, at, client, event FROM {e} WHERE at < ? ORDER BY at, id", (before,)
            )
        return [(int(i), int(at), str(c), str(e)) for i, at, c, e in rows.fetchall()]

    def remove_events(self, ids: Sequence[int]) -> None:
        self._db.many("DELETE FROM {e} WHERE id = ?", [(id_,) for id_ in ids])

    def folded(self, at: float) -> None:
        """Record a fold at ``at`` (seconds since the epoch)."""
        self.put(FOLDED, -2, 0, at, ClientFigures(), None)

    def client(
        self, client: str
    ) -> tuple[int, int, ClientFigures, Mapping[str, Any] | None] | None:
        """``client``'s row: (kept, busy, figures, fold state), None when it has none."""
        row = self._db.run(
            f"SELECT kept, busy, {_COLUMNS}, state FROM {{t}} WHERE client = ?", (client,)
        ).fetchone()
        if row is None:
            return None
        state: Mapping[str, Any] | None = json.loads(row[-1])
        return int(row[0]), int(row[1]), _figures(row[2:-1]), state

    def make_room(self, pool: int, capacity: int, busy: int | None = None) -> bool:
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
        """Let ``client`` go, its figures added to the ``FORGOTTEN`` row."""
        row = self._db.run(f"SELECT {_COLUMNS} FROM {{t}} WHERE client = ?", (client,)).fetchone()
        self._db.run("DELETE FROM {t} WHERE client = ?", (client,))
        left = self._db.run(
            f"SELECT busy, {_COLUMNS} FROM {{t}} WHERE client = ?", (FORGOTTEN,)
        ).fetchone() or (0,) * (len(FIGURES) + 1)
        sums = [int(a) + int(b) for a, b in zip(left[1:], row, strict=True)]
        figures = ClientFigures(**dict(zip(FIGURES, sums, strict=True)))
        self.put(FORGOTTEN, -1, int(left[0]) + 1, time.time(), figures, None)

    def put(
        self, client: str, kept: int, busy: int, seen: float, figures: ClientFigures, data: object
    ) -> None:
        """Write ``client``'s row."""
        values = [getattr(figures, name) for name in FIGURES]
        self._db.run(
            f"INSERT INTO {{t}} (client, kept, busy, seen, {_COLUMNS}, state)"
            f" VALUES (?, ?, ?, ?, {', '.join('?' * len(FIGURES))}, ?)"
            " ON CONFLICT (client) DO UPDATE SET kept = excluded.kept, busy = excluded.busy,"
            " seen = excluded.seen, "
            + ", ".join(f"{name} = excluded.{name}" for name in FIGURES)
            + ", state = excluded.state",
            (client, kept, busy, seen, *values, json.dumps(data, separators=(",", ":"))),
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
