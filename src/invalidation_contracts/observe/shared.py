"""Client scores shared by every worker of one registry (issue 42): any worker scores any client.

At ``serve --workers N`` a client's requests reach any worker (a load balancer, or no keep-alive),
and a retry is a retry, a taught fix stays taught, whichever worker answers. So each client's
scoring state (its figures, its refusal streaks, the fixes it was taught) lives beside the
registry's history, written off the request path and folded in order (``ClientScores.fold`` is
the fold; this module keeps the rows and the order):

- A policy check appends one event (when, client, route, request, served seq, what a refusal
  taught) to the worker's own buffer: no database on the request path.
- Every ``FLUSH_S`` the worker's flush thread writes its buffer in one transaction. A killed
  worker loses what it had not written: at most ``FLUSH_S`` of its requests.
- Every ``FOLD_S`` one worker (whichever comes first) folds, in one transaction, every event older
  than ``SETTLE_S`` in time order, so each client's requests fold in the order they came whichever
  worker wrote them (a retry stays a retry): a client's state is read and written once per fold,
  not once per request. An event checked on a served state this worker has not reached waits.
  The figures read lag the requests by at most ``SETTLE_S + FOLD_S + FLUSH_S``; an event written
  later than ``SETTLE_S`` after its request (a worker stalled that long) folds late, out of order.
- SQLite: a file of its own in a folder beside the registry file
  (``<registry>-clients/scores.sqlite``, WAL, synchronous NORMAL: a score is telemetry; its own
  folder, as every write in the registry's folder wakes every worker's follower, inotify
  watching the folder); PostgreSQL: the tables ``client_scores`` and ``client_events`` in the
  registry's schema, one advisory transaction lock per fold.

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
import logging
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..server.domain import Route
from ..server.policies import Finding
from ..server.state import RegistryState
from ..server.store.dialect import Cursor
from .lessons import RefusalLesson, Taught
from .scoring import BUSY_CAP, DEFAULT_MAX_CLIENTS, Checked, ClientFigures, ClientScores

if TYPE_CHECKING:
    from ..server.registry import Registry

logger = logging.getLogger(__name__)

ADMIT = 2
"""Requests after which a client key is kept (a repeat client), not a newcomer."""
DEFAULT_MAX_NEWCOMERS = 1_000
FORGOTTEN = "*forgotten"
"""The row summing the figures of every client that left (no client key has this form)."""
FOLDED = "*folded"
"""The row whose ``seen`` is when a worker last folded (its figures stay 0)."""
FLUSH_S = 0.1
"""How often a worker writes its buffered events: what a killed worker loses at most."""
FOLD_S = 0.25
"""How often one of the workers folds the written events."""
SETTLE_S = 0.5
"""How old an event must be to fold: every live worker has written what came before it."""
KEPT_STATES = 64
"""Served states kept per worker to judge the events checked on them."""
MAX_BUFFERED = 100_000
"""Events a worker buffers at most while its database is away (the oldest then go)."""
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


@dataclass(frozen=True, slots=True)
class _Event:
    """One policy check waiting to be written: ``at`` in nanoseconds since the epoch."""

    at: int
    client: str
    path: str
    request: Mapping[str, Any]
    epoch: str
    seq: int
    lesson: str | None


class SharedScores:
    """Every client's figures, kept in the registry's database (see the module docstring).

    The same reads as ``ClientScores`` (``totals``, ``figures``, ``busiest``, ``snapshot``,
    ``forgotten``, ``len``), each a query: the figures of every worker, as last folded."""

    scope: str | None = SCOPE

    def __init__(
        self,
        target: str,
        *,
        schema: str | None = None,
        fold: ClientScores | None = None,
        max_clients: int = DEFAULT_MAX_CLIENTS,
        max_newcomers: int = DEFAULT_MAX_NEWCOMERS,
        flush_s: float = FLUSH_S,
        fold_s: float = FOLD_S,
        settle_s: float = SETTLE_S,
    ) -> None:
        """``target``: the registry's SQLite path or ``postgresql://`` URL (``schema``: its
        schema); ``fold``: the fold's settings (attempts per episode, fixes per client)."""
        from ..server.store import is_postgres_url

        if max_clients < 1 or max_newcomers < 1:
            raise ValueError("max_clients and max_newcomers must be at least 1")
        self.max_clients = max_clients
        self.max_newcomers = max_newcomers
        self.flush_s, self.fold_s, self.settle_s = flush_s, fold_s, settle_s
        self._fold = fold if fold is not None else ClientScores()
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        self._kept: dict[tuple[str, tuple[Any, ...]], tuple[float, list[Any]]] = {}
        self._buffer: list[_Event] = []
        self._buffer_lock = threading.Lock()
        self.dropped = 0
        """Events dropped because the buffer was full (the database unreachable that long)."""
        self._texts: dict[int, tuple[RefusalLesson, str]] = {}
        self._lessons: dict[str, RefusalLesson] = {}
        self._states: dict[int, RegistryState] = {}
        self._states_lock = threading.Lock()
        self._routes: dict[str, Route[Any]] = {}
        self._registry: Registry | None = None
        self._undo: list[Callable[[], None]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
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

    def attach(self, registry: Registry, routes: Sequence[Route[Any]]) -> None:
        """Fold for the worker that serves ``registry`` (its served states judge the stale
        values) and ``routes``; starts the flush thread."""
        self._registry = registry
        self._routes.update({route.path: route for route in routes})
        self._seen(registry.state)
        self._undo.append(registry.subscribe(lambda _before, after: self._seen(after)))
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="client-scores-flush", daemon=True
            )
            self._thread.start()

    def _seen(self, state: RegistryState) -> None:
        """Keep ``state`` for the events checked on it (the last ``KEPT_STATES``)."""
        with self._states_lock:
            states = self._states
            if states.get(state.seq) is state:
                return
            if any(kept.epoch != state.epoch for kept in states.values()):
                states.clear()
            states[state.seq] = state
            while len(states) > KEPT_STATES:
                del states[min(states)]

    def checked(
        self,
        client: str,
        route: Route[Any],
        request: Mapping[str, Any],
        state: RegistryState,
        findings: tuple[Finding, ...],
        document: bytes | None = None,
    ) -> None:
        """Buffer one request of ``client`` (folded later, in order: the module docstring)."""
        lesson = self._fold.lesson(findings, document)
        event = _Event(
            time.time_ns(),
            client,
            route.path,
            request,
            state.epoch,
            state.seq,
            None if lesson is None else self._text(lesson),
        )
        self._routes.setdefault(route.path, route)
        with self._buffer_lock:
            if len(self._buffer) >= MAX_BUFFERED:
                del self._buffer[0]
                self.dropped += 1
            self._buffer.append(event)

    def _text(self, lesson: RefusalLesson) -> str:
        """``lesson`` as written in an event (kept per lesson object: a cached 422 repeats it)."""
        found = self._texts.get(id(lesson))
        if found is not None and found[0] is lesson:
            return found[1]
        text = json.dumps(
            [
                list(lesson.policies),
                [[f.type, f.scope, f.parameters, f.policy] for f in lesson.fixes],
                sorted(lesson.refused),
            ],
            separators=(",", ":"),
        )
        if len(self._texts) >= 1024:
            self._texts.clear()
        self._texts[id(lesson)] = (lesson, text)
        return text

    def _lesson(self, text: str) -> RefusalLesson:
        found = self._lessons.get(text)
        if found is None:
            policies, fixes, refused = json.loads(text)
            found = RefusalLesson(
                tuple(policies),
                tuple(Taught.build(*fix) for fix in fixes),
                frozenset((str(a), str(b)) for a, b in refused),
            )
            if len(self._lessons) >= 1024:
                self._lessons.clear()
            self._lessons[text] = found
        return found

    # -- off the request path: the flush thread ----------------------------------------------------

    def _run(self) -> None:
        next_fold = time.monotonic() + random.uniform(0, self.fold_s)
        while not self._stop.wait(self.flush_s):
            try:
                self.flush()
                if time.monotonic() >= next_fold:
                    next_fold = time.monotonic() + self.fold_s
                    self.fold()
            except Exception:  # the database away: kept in the buffer, tried again
                logger.warning("client scores: flush failed", exc_info=True)

    def flush(self) -> int:
        """Write this worker's buffered events in one transaction; how many."""
        with self._buffer_lock:
            events, self._buffer = self._buffer, []
        if not events:
            return 0
        rows = [
            (
                e.at,
                e.client,
                json.dumps(
                    {"p": e.path, "q": e.request, "e": e.epoch, "s": e.seq, "l": e.lesson},
                    separators=(",", ":"),
                ),
            )
            for e in events
        ]
        try:
            with self._lock, self._db.transaction():
                self._db.many("INSERT INTO {e} (at, client, event) VALUES (?, ?, ?)", rows)
        except BaseException:
            with self._buffer_lock:
                self._buffer[:0] = events[: max(0, MAX_BUFFERED - len(self._buffer))]
            raise
        return len(events)

    def fold(self, *, everything: bool = False) -> int:
        """Fold the written events older than ``settle_s`` (``everything``: all of them, for a
        caller that knows every worker has flushed), unless another worker folded less than
        ``fold_s`` ago; how many were folded."""
        if self._registry is not None:
            self._seen(self._registry.state)
        now = time.time_ns()
        cutoff = None if everything else now - int(self.settle_s * 1e9)
        with self._lock, self._db.transaction():
            if not everything:
                last = self._db.run("SELECT seen FROM {t} WHERE client = ?", (FOLDED,)).fetchone()
                if last is not None and now / 1e9 - float(last[0]) < self.fold_s:
                    return 0
            if cutoff is None:
                rows = self._db.run("SELECT id, at, client, event FROM {e} ORDER BY at, id")
            else:
                rows = self._db.run(
                    "SELECT id, at, client, event FROM {e} WHERE at < ? ORDER BY at, id", (cutoff,)
                )
            by_client: dict[str, list[tuple[int, int, str]]] = {}
            for id_, at, client, event in rows.fetchall():
                by_client.setdefault(str(client), []).append((int(id_), int(at), str(event)))
            done: list[tuple[int]] = []
            for client, events in by_client.items():
                done.extend((id_,) for id_ in self._fold_client(client, events))
            if done:
                self._db.many("DELETE FROM {e} WHERE id = ?", done)
            self._put(FOLDED, -2, 0, now / 1e9, ClientFigures(), None)
        return len(done)

    def _fold_client(self, client: str, events: list[tuple[int, int, str]]) -> list[int]:
        """Fold ``client``'s ``events`` (in order) into its row; the ids folded (an event on a
        state this worker has not reached waits, and so do the client's events after it)."""
        checks: list[Checked] = []
        ids: list[int] = []
        seen = 0
        for id_, at, text in events:
            event = json.loads(text)
            route = self._routes.get(event["p"])
            state = self._state(str(event["e"]), int(event["s"]))
            if route is None or state is None:
                break
            lesson = None if event["l"] is None else self._lesson(event["l"])
            checks.append((route, event["q"], state, lesson))
            ids.append(id_)
            seen = at
        if not checks:
            return ids
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
        data = self._fold.fold(data, figures, checks)
        busy = min(busy + len(checks), BUSY_CAP)
        if not kept and busy >= ADMIT:
            kept = 1 if self._make_room(1, self.max_clients, busy) else 0
        self._put(client, kept, busy, seen / 1e9, figures, data)
        return ids

    def _state(self, epoch: str, seq: int) -> RegistryState | None:
        """The served state an event was checked on: kept, else (another epoch, or older than
        those kept) the nearest newer one; None when this worker has not reached it yet."""
        states = self._states
        found = states.get(seq)
        if found is not None and found.epoch == epoch:
            return found
        if not states:
            return None
        newest = states[max(states)]
        if newest.epoch != epoch:
            return newest
        newer = [s for s in states if s > seq]
        return states[min(newer)] if newer else None

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
        self._put(FORGOTTEN, -1, int(left[0]) + 1, time.time(), figures, None)

    def _put(
        self, client: str, kept: int, busy: int, seen: float, figures: ClientFigures, data: object
    ) -> None:
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
        """Stop the flush thread, write what is buffered (folded by whichever worker folds
        next), and close the connections."""
        for undo in self._undo:
            undo()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        try:
            self.flush()
        except Exception:
            logger.warning("client scores: the last flush failed", exc_info=True)
        with self._lock:
            self._db.close()
        with self._read_lock:
            self._reader.close()


def _figures(values: Sequence[Any]) -> ClientFigures:
    return ClientFigures(**dict(zip(FIGURES, (int(v) for v in values), strict=True)))
