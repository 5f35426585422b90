"""The follower: a worker's background thread that keeps its registry at the shared head.

It wakes on the registry's PostgreSQL ``NOTIFY`` or, on Linux, on inotify events of its SQLite
files (``wakeups``; elsewhere it polls them) and adopts what other workers committed; as the
leader of a PostgreSQL source it also looks at the capture's head every poll interval (provider
writers send no ``NOTIFY``: ``sql.lead``) and consumes new captures (``ingest``), and its
registry commit wakes the others. Every round that reads the databases without error *confirms*
the worker's position (``health``); a worker whose last confirmation is older than ``max_lag_s``
(or whose last round failed) is *unavailable*: the HTTP layer answers 503 rather than stamps it
cannot vouch for. Every failure — opening a listener, waiting on it, checking, taking the lead —
is caught, logged once per outage and retried with bounded, jittered backoff (``timing``), so a
worker recovers by itself as soon as its databases answer again. A call that never returns is
ended by the ``watchdog``, and the failed round is retried on fresh connections.
"""

from __future__ import annotations

import random
import threading
import time
from functools import partial
from typing import TYPE_CHECKING

from ..._deprecation import moved_names
from ..capture.source import surveyed
from ..capture.steps import ingest
from ..quiet import QuietCheck
from ..registry import Registry
from .health import FollowerState, Health, HealthRecord
from .reconciler import Reconciler
from .timing import (
    DEFAULT_HEARTBEAT_S,
    DEFAULT_MAX_LAG_S,
    DEFAULT_POLL_INTERVAL_S,
    DEFAULT_RETRY_BASE_S,
    DEFAULT_RETRY_MAX_S,
    backoff,
    check_timing,
    stall_bound,
)
from .wakeups import Wakeups
from .watchdog import Watchdog

if TYPE_CHECKING:
    from ..capture.source import ChangeSource
    from ..capture.survey import Recheck
    from ..store.base import SQLRegistryStore
    from ..store.dialect import Connection

__all__ = ["Follower", "FollowerState", "Health"]

__getattr__ = moved_names(
    __name__,
    {
        "DEFAULT_STALL_TIMEOUT_S": "invalidation_contracts.server.worker.timing",
        "STUCK_AFTER_S": "invalidation_contracts.server.worker.timing",
        "SETTLE_POLLS": "invalidation_contracts.server.worker.wakeups",
        "SETTLE_FIRST_S": "invalidation_contracts.server.worker.wakeups",
        "open_listeners": "invalidation_contracts.server.worker.wakeups",
    },
)


class Follower:
    """Keeps a worker's registry at the shared head; a daemon thread started with the app."""

    def __init__(
        self,
        registry: Registry,
        sources: tuple[ChangeSource, ...] = (),
        *,
        store: SQLRegistryStore[Connection] | None = None,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        max_lag_s: float = DEFAULT_MAX_LAG_S,
        retry_base_s: float = DEFAULT_RETRY_BASE_S,
        retry_max_s: float = DEFAULT_RETRY_MAX_S,
        stall_timeout_s: float | None = None,
    ) -> None:
        check_timing(poll_interval_s, heartbeat_s, max_lag_s)
        if not 0 < retry_base_s <= retry_max_s:
            raise ValueError("retry_base_s must be positive and at most retry_max_s")
        self.registry = registry
        self.sources = sources
        self.store = store
        self.poll_interval_s = poll_interval_s
        self.heartbeat_s = heartbeat_s
        self.max_lag_s = max_lag_s
        self.retry_base_s = retry_base_s
        self.retry_max_s = retry_max_s
        self.record = HealthRecord(max_lag_s)
        self._seen: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        owners: list[tuple[str, object]] = [("", store)] if store is not None else []
        owners += [(source.name, source) for source in sources]
        self.wakeups = Wakeups(
            owners, poll_interval_s=poll_interval_s, heartbeat_s=heartbeat_s, stop=self._stop
        )
        self.watchdog = Watchdog(
            stall_bound(stall_timeout_s, max_lag_s), self._connections, self._stop
        )
        self._rng = random.Random()  # noqa: S311 - jitter, not security
        self._quiet = QuietCheck([owner for _, owner in owners], heartbeat_s)
        self.reconciler = Reconciler()

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="invalidation-contracts-follower", daemon=True
            )
            self.watchdog.turn()
            self._thread.start()
            self.watchdog.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        self.watchdog.join()
        self.reconciler.join(10)
        self.wakeups.close()
        self._quiet.reset()

    # -- what the HTTP layer reads (no I/O) ------------------------------------------------------

    @property
    def health(self) -> Health:
        return self.record.health

    @property
    def failures(self) -> int:
        return self.record.failures

    @property
    def backlog(self) -> dict[str, int | None]:
        """Per source this worker is catching up with: the capture records still waiting."""
        return self.record.backlog

    @property
    def stalls(self) -> int:
        """How often the watchdog broke a stalled loop's connections."""
        return self.watchdog.stalls

    @property
    def stall_timeout_s(self) -> float:
        return self.watchdog.stall_timeout_s

    @property
    def lag_s(self) -> float:
        """Seconds since the start of the last round that confirmed this worker current."""
        return self.record.lag_s

    @property
    def available(self) -> bool:
        """Whether this worker may stamp: its last round succeeded, within ``max_lag_s``."""
        if self._thread is None and self._stop.is_set():  # stopped on purpose (shutting down)
            return self.record.health.available
        # Never started (a lifespan that did not run): as fresh as the check made when the
        # registry was opened, within the same bound, then no longer.
        return self.record.fresh

    @property
    def never_started(self) -> bool:
        """Not started (nor stopped): nothing keeps this worker's registry current by itself."""
        return self._thread is None and not self._stop.is_set()

    @property
    def live(self) -> bool:
        """Whether the follower thread runs and its loop turns (else only a restart helps)."""
        thread = self._thread
        if thread is None:
            return True  # not started, or stopped on purpose
        return thread.is_alive() and not self.watchdog.stuck

    @property
    def state(self) -> FollowerState:
        thread = self._thread
        if thread is None:
            return "stopped" if self._stop.is_set() else "idle"
        if not thread.is_alive():
            return "dead"
        if self.failures:
            return "retrying"
        return "catching-up" if self.backlog else "following"

    @property
    def reason(self) -> str | None:
        return self.record.reason(self.available, self.never_started)

    def leads(self) -> dict[str, bool]:
        """For each source, whether this worker consumes its capture now (the capture leader)."""
        opened = bool(self.wakeups.listeners)
        return {source.name: self.wakeups.leads(source.name) and opened for source in self.sources}

    # -- the loop ------------------------------------------------------------------------------

    def check(self, *, everything: bool = True, notified: frozenset[str] = frozenset()) -> None:
        """One round: consume new captures (as the leader, or ``everything``), else catch up.

        Raises when a database fails. ``notified``: sources whose capture just signalled a change
        (no need to read their head first).
        """
        ingested = False
        for source in self.sources:
            recheck = self._survey(source)
            if source.name in notified or recheck is not None:
                self._ingest(source, recheck=recheck)  # catches up under the write lock
                if getattr(source, "contiguous", True):  # the position is the head read
                    self._seen[source.name] = self.registry.position(source.name) or 0
                elif (looked := self.wakeups.looked(source.name)) is not None:
                    # positions and heads differ in kind, but the lead's look that woke this
                    # round read the head before the ingest: what it counted is consumed
                    self._seen[source.name] = looked
                else:  # the next round reads the head
                    self._seen.pop(source.name, None)
                ingested = True
                continue
            leads = self.wakeups.leads(source.name) and not self.wakeups.polls(source.name)
            if not (everything or leads):
                continue
            head = source.head()
            due = getattr(source, "reconcile_due", None)  # the periodic reconciliation (ingest)
            if surveyed(source) is not None:  # surveyed beside the loop instead (_survey)
                due = None
            reconcile = due is not None and due()
            if not reconcile and head == self._seen.get(source.name):
                continue
            if reconcile or not _drained(source):  # else the leader consumed it all: no lock
                self._ingest(source, head=head)
                ingested = True
            self._seen[source.name] = head
        if not ingested:
            self.registry.sync()

    def _survey(self, source: ChangeSource) -> Recheck | None:
        """A surveyed source: start its survey when due and this worker leads its capture (the
        others adopt what the leader reconciles); the candidates of a finished one, if any."""
        surveyed_source = surveyed(source)
        if surveyed_source is None:
            return None
        if self.wakeups.leads(source.name) and surveyed_source.reconcile_due():
            self.reconciler.start(self.registry, surveyed_source)
        return self.reconciler.pending(source.name)

    def _ingest(
        self, source: ChangeSource, head: int | None = None, recheck: Recheck | None = None
    ) -> None:
        """Consume ``source``'s capture; each committed batch of a backlog counts as a turn of
        the loop (the watchdog spares a round that makes progress) and updates ``backlog``."""
        try:
            ingest(
                self.registry,
                source,
                head=head,
                progress=partial(self._progress, source),
                recheck=recheck,
            )
        finally:
            self.record.caught_up(source.name)
            if recheck is not None:
                self.reconciler.rechecked(source.name, recheck)

    def _progress(self, source: ChangeSource, waiting: int | None) -> None:
        self.watchdog.turn()
        self.record.progress(source.name, waiting)

    def _run(self) -> None:
        everything, notified = True, frozenset[str]()
        while not self._stop.is_set():
            self.watchdog.turn()
            turned = self.watchdog.turned
            # A round woken by one database confirms only that one: at least once a heartbeat,
            # a round reads every database, and only such a round confirms the worker current.
            everything = everything or turned - self.health.last_ok >= self.heartbeat_s
            try:
                self.wakeups.open()
                started = time.monotonic()
                polls = self.wakeups.polling() or self.wakeups.settling(started)
                if not (everything and polls and self._quiet.unchanged(started, self.sources)):
                    self.check(everything=everything, notified=notified)
            except Exception as exc:  # a worker must keep trying, and say why it cannot serve
                self.record.failed(exc)
                self._retry()
                everything, notified = True, frozenset()
                continue
            if everything:
                self.record.ok(started)
            try:
                everything, notified = self.wakeups.wait(self.health.last_ok)
            except Exception as exc:  # a dropped LISTEN connection: reconnect, then check all
                self.record.listener_failed(exc)
                self._retry()
                everything, notified = True, frozenset()

    def _connections(self) -> list[object]:
        """What the watchdog breaks: the store, the sources and the wake-up connections."""
        owners = [owner for _, owner in self.wakeups.owners]
        return [*owners, *(self.wakeups.listeners or {}).values()]

    def _retry(self) -> None:
        """After a failure: close the connections, wait a backoff; the next round reopens."""
        self.wakeups.close()
        self._quiet.reset()
        self._stop.wait(
            backoff(self.record.failures, self.retry_base_s, self.retry_max_s, self._rng)
        )


def _drained(source: ChangeSource) -> bool:
    """Whether ``source``'s capture holds no record (all consumed and trimmed): a round that
    finds its head moved then takes no registry lock to find nothing (False: unknown)."""
    drained = getattr(source, "drained", None)
    return drained is not None and bool(drained())
