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
- The rows live in ``observe.score_store`` (SQLite beside the registry file, or tables in the
  registry's PostgreSQL schema).

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
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..server.domain import Route
from ..server.policies import Finding
from ..server.state import RegistryState
from .lessons import RefusalLesson, Taught
from .score_store import ScoreStore
from .scoring import BUSY_CAP, DEFAULT_MAX_CLIENTS, Checked, ClientFigures, ClientScores

if TYPE_CHECKING:
    from ..server.registry import Registry

logger = logging.getLogger(__name__)

ADMIT = 2
"""Requests after which a client key is kept (a repeat client), not a newcomer."""
DEFAULT_MAX_NEWCOMERS = 1_000
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
        if max_clients < 1 or max_newcomers < 1:
            raise ValueError("max_clients and max_newcomers must be at least 1")
        self.max_clients = max_clients
        self.max_newcomers = max_newcomers
        self.flush_s, self.fold_s, self.settle_s = flush_s, fold_s, settle_s
        self._fold = fold if fold is not None else ClientScores()
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
        self.store = ScoreStore(target, schema=schema)

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
            with self.store.writing():
                self.store.add_events(rows)
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
        with self.store.writing():
            if not everything:
                last = self.store.last_fold()
                if last is not None and now / 1e9 - last < self.fold_s:
                    return 0
            by_client: dict[str, list[tuple[int, int, str]]] = {}
            for id_, at, client, event in self.store.events(cutoff):
                by_client.setdefault(client, []).append((id_, at, event))
            done: list[int] = []
            for client, events in by_client.items():
                done.extend(self._fold_client(client, events))
            if done:
                self.store.remove_events(done)
            self.store.folded(now / 1e9)
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
        row = self.store.client(client)
        if row is None:
            kept, busy, figures, data = 0, 0, ClientFigures(), None
            self.store.make_room(0, self.max_newcomers)
        else:
            kept, busy, figures, data = row
        data = self._fold.fold(data, figures, checks)
        busy = min(busy + len(checks), BUSY_CAP)
        if not kept and busy >= ADMIT:
            kept = 1 if self.store.make_room(1, self.max_clients, busy) else 0
        self.store.put(client, kept, busy, seen / 1e9, figures, data)
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

    # -- reads (the metrics, the operator page) ---------------------------------------------------

    def totals(self) -> ClientFigures:
        """Every client's figures summed, the forgotten ones included."""
        return self.store.totals()

    def figures(self, client: str) -> ClientFigures | None:
        return self.store.figures(client)

    def busiest(self, n: int) -> list[tuple[str, ClientFigures]]:
        """The ``n`` clients with the most requests (ties: by key), with their figures."""
        return self.store.busiest(n)

    def snapshot(self) -> dict[str, ClientFigures]:
        return self.store.snapshot()

    def __len__(self) -> int:
        """Clients kept now (newcomers included)."""
        return len(self.store)

    @property
    def forgotten(self) -> int:
        """Clients that left to make room (their figures stay in the totals)."""
        return self.store.forgotten

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
        self.store.close()
