"""The follower: a worker's background thread that keeps its registry at the shared head.

It wakes on the registry's PostgreSQL ``NOTIFY`` or, on Linux, on inotify events of its SQLite
files (``store.inotify``; elsewhere it polls them) and adopts what other workers committed; as the
leader of a PostgreSQL source it also looks at the capture's head every poll interval (provider
writers send no ``NOTIFY``: ``sql.lead``) and consumes new captures (``ingest``), and its
registry commit wakes the others. Every round that reads the
databases without error *confirms* the worker's position; a worker whose last confirmation is
older than ``max_lag_s`` (or whose last round failed) is *unavailable*: the HTTP layer answers 503
rather than stamps it cannot vouch for. Every failure — opening a listener, waiting on it,
checking, taking the lead — is caught, logged once per outage and retried with bounded, jittered
backoff, so a worker recovers by itself as soon as its databases answer again. A call that never
returns (a link gone silent: a black hole, a proxy that forgot the connection, no FIN, no RST)
is ended by a watchdog: when the loop has not turned for ``stall_timeout_s`` it breaks the
connections the loop may wait on (``interrupt`` of the store, the sources and the wake-ups), and
the failed round is retried on fresh connections like any other failure.
"""

from __future__ import annotations

import logging
import random
import select
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Literal, TypeGuard

from ..capture.steps import ingest
from ..quiet import QuietCheck
from ..registry import Registry
from ..store.inotify import FileWakeup

if TYPE_CHECKING:
    from ..capture.source import ChangeSource, LeadWakeup, Wakeup
    from ..store.base import SQLRegistryStore
    from ..store.dialect import Connection

logger = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL_S = 0.02
"""How often a worker looks for changes nothing wakes it for: every SQLite file it cannot watch
(not Linux, inotify unavailable), and the head of each PostgreSQL capture it leads (so a captured
write waits at most this long)."""
SETTLE_POLLS = 5
"""After an event on a SQLite file, a worker looks again for this many poll intervals: a WAL
commit becomes visible (in the shared-memory index, which inotify does not see) only after its
last write to the file (and its fsync), so the round that write woke may read before it. The looks
start ``SETTLE_FIRST_S`` after the event and double up to the poll interval."""
SETTLE_FIRST_S = 0.001
DEFAULT_HEARTBEAT_S = 1.0
"""How often a worker that is woken (NOTIFY, inotify) checks every database anyway (and a worker
that does not lead a capture bids for its lead)."""
DEFAULT_MAX_LAG_S = 2.0
"""A worker whose last confirmation that it is current is older than this answers 503."""
DEFAULT_RETRY_BASE_S = 0.05
"""The first wait after a failure; it doubles on each further failure, up to ``RETRY_MAX_S``."""
DEFAULT_RETRY_MAX_S = 1.0
"""The longest wait between two attempts while the databases fail."""
STUCK_AFTER_S = 30.0
"""A follower whose loop has not turned for this long is not live (a hung database call)."""
DEFAULT_STALL_TIMEOUT_S = 20.0
"""A loop that has not turned for this long waits on a silent link: its connections are broken
so it reconnects (before ``STUCK_AFTER_S`` would call for a restart). The default bound is this
or twice ``max_lag_s``, whichever is longer."""

FollowerState = Literal["idle", "following", "catching-up", "retrying", "stopped", "dead"]


@dataclass(frozen=True)
class Health:
    """Whether this worker can vouch for its state, and why not.

    ``last_ok``: the monotonic time at which the last successful round *started* (what it read
    was current then); ``reason``: the last failure's one-line reason, while it lasts.
    """

    available: bool = True
    reason: str | None = None
    last_ok: float = field(default_factory=time.monotonic)


def check_timing(poll_interval_s: float, heartbeat_s: float, max_lag_s: float) -> None:
    """Refuse a lag bound a worker cannot keep: it confirms once per poll or heartbeat."""
    if not 0 < poll_interval_s < max_lag_s or not 0 < heartbeat_s < max_lag_s:
        raise ValueError(
            f"max_lag_s ({max_lag_s:g}) must exceed poll_interval_s ({poll_interval_s:g}) and "
            f"heartbeat_s ({heartbeat_s:g}), both positive: a worker confirms once per interval"
        )


def stall_bound(stall_timeout_s: float | None, max_lag_s: float) -> float:
    """The stall bound: ``stall_timeout_s``, or by default the longer of
    ``DEFAULT_STALL_TIMEOUT_S`` and twice the lag bound. A given one must exceed ``max_lag_s``
    (a healthy loop turns at least once a heartbeat, which is shorter)."""
    if stall_timeout_s is None:
        return max(DEFAULT_STALL_TIMEOUT_S, 2 * max_lag_s)
    if not stall_timeout_s > max_lag_s:
        raise ValueError(
            f"stall_timeout_s ({stall_timeout_s:g}) must exceed max_lag_s ({max_lag_s:g}): a "
            "loop that turns within the lag bound is not stalled"
        )
    return stall_timeout_s


def backoff(failures: int, base_s: float, max_s: float, rng: random.Random) -> float:
    """The wait after ``failures`` consecutive failures: exponential, capped, jittered (50-100%)."""
    ceiling = min(max_s, base_s * 2.0 ** min(failures - 1, 30))
    return ceiling * (0.5 + rng.random() / 2)


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
        self.stall_timeout_s = stall_bound(stall_timeout_s, max_lag_s)
        self.stalls = 0  # how often the watchdog broke a stalled loop's connections
        self.health = Health()
        self.failures = 0
        self.backlog: dict[str, int | None] = {}
        """Per source this worker is catching up with: the capture records still waiting."""
        self._seen: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watchdog: threading.Thread | None = None
        self._listeners: dict[str, Wakeup] | None = None
        self._turned = time.monotonic()
        self._rng = random.Random()  # noqa: S311 - jitter, not security
        self._bid_at = float("-inf")
        self._settle_until, self._settle_step = float("-inf"), SETTLE_FIRST_S
        self._quiet = QuietCheck([owner for _, owner in self._owners()], heartbeat_s)

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._turned = time.monotonic()
            self._thread = threading.Thread(
                target=self._run, name="invalidation-contracts-follower", daemon=True
            )
            self._thread.start()
            self._watchdog = threading.Thread(
                target=watch, args=(self,), name="invalidation-contracts-watchdog", daemon=True
            )
            self._watchdog.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        if self._watchdog is not None:
            self._watchdog.join(10)
            self._watchdog = None
        self._close_listeners()
        self._quiet.reset()

    # -- what the HTTP layer reads (no I/O) ------------------------------------------------------

    @property
    def lag_s(self) -> float:
        """Seconds since the start of the last round that confirmed this worker current."""
        return max(0.0, time.monotonic() - self.health.last_ok)

    @property
    def available(self) -> bool:
        """Whether this worker may stamp: its last round succeeded, within ``max_lag_s``."""
        health = self.health
        if self._thread is None and self._stop.is_set():  # stopped on purpose (shutting down)
            return health.available
        # Never started (a lifespan that did not run): as fresh as the check made when the
        # registry was opened, within the same bound, then no longer.
        return health.available and self.lag_s < self.max_lag_s

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
        return thread.is_alive() and time.monotonic() - self._turned < STUCK_AFTER_S

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
        if self.health.reason is not None and not self.available:
            return self.health.reason
        if self.available:
            return None
        if self.never_started:
            return "this worker's follower never started (did the app's lifespan run?)"
        return (
            f"this worker has not confirmed it is current for {self.lag_s:.1f} s "
            f"(the bound is {self.max_lag_s:g} s){_catching_up(self.backlog)}"
        )

    def leads(self) -> dict[str, bool]:
        """For each source, whether this worker consumes its capture now (the capture leader)."""
        listeners = self._listeners or {}
        return {source.name: self._leads(source) and bool(listeners) for source in self.sources}

    # -- the loop ------------------------------------------------------------------------------

    def check(self, *, everything: bool = True, notified: frozenset[str] = frozenset()) -> None:
        """One round: consume new captures (as the leader, or ``everything``), else catch up.

        Raises when a database fails. ``notified``: sources whose capture just signalled a change
        (no need to read their head first).
        """
        ingested = False
        for source in self.sources:
            if source.name in notified:
                self._ingest(source)  # catches up under the write lock
                if getattr(source, "contiguous", True):  # the position is the head read
                    self._seen[source.name] = self.registry.position(source.name) or 0
                else:  # positions and heads differ in kind: the next round reads the head
                    self._seen.pop(source.name, None)
                ingested = True
                continue
            if not (everything or (self._leads(source) and not self._polls(source))):
                continue
            head = source.head()
            due = getattr(source, "reconcile_due", None)  # the periodic reconciliation (ingest)
            if head != self._seen.get(source.name) or (due is not None and due()):
                self._ingest(source, head=head)
                self._seen[source.name] = head
                ingested = True
        if not ingested:
            self.registry.sync()

    def _ingest(self, source: ChangeSource, head: int | None = None) -> None:
        """Consume ``source``'s capture; each committed batch of a backlog counts as a turn of
        the loop (the watchdog spares a round that makes progress) and updates ``backlog``."""
        try:
            ingest(self.registry, source, head=head, progress=partial(_progress, self, source))
        finally:
            self.backlog = {k: v for k, v in self.backlog.items() if k != source.name}

    def _leads(self, source: ChangeSource) -> bool:
        listener = (self._listeners or {}).get(source.name)
        return listener is None or bool(getattr(listener, "leader", True))

    def _polls(self, source: ChangeSource) -> bool:
        """Whether ``_wait`` looks at ``source``'s capture head every poll interval (so a round
        that is not told it moved need not read it)."""
        return _polls((self._listeners or {}).get(source.name))

    def _run(self) -> None:
        everything, notified = True, frozenset[str]()
        while not self._stop.is_set():
            self._turned = time.monotonic()
            # A round woken by one database confirms only that one: at least once a heartbeat,
            # a round reads every database, and only such a round confirms the worker current.
            everything = everything or self._turned - self.health.last_ok >= self.heartbeat_s
            try:
                if self._listeners is None:
                    self._listeners = open_listeners(self._owners())
                started = time.monotonic()
                polls = self._polling() or started < self._settle_until
                if not (everything and polls and self._quiet.unchanged(started, self.sources)):
                    self.check(everything=everything, notified=notified)
            except Exception as exc:  # a worker must keep trying, and say why it cannot serve
                self._failed(exc)
                everything, notified = True, frozenset()
                continue
            if everything:
                self._ok(started)
            try:
                everything, notified = self._wait()
            except Exception as exc:  # a dropped LISTEN connection: reconnect, then check all
                self._listener_failed(exc)
                everything, notified = True, frozenset()

    def _polling(self) -> bool:
        """Whether some database cannot wake this worker (SQLite it cannot watch): it then polls
        them all every poll interval (``_wait``), and a round may skip reading (``QuietCheck``)."""
        listeners = self._listeners or {}
        return any(listeners.get(name) is None for name, _ in self._owners())

    def _wait(self) -> tuple[bool, frozenset[str]]:
        """Wait for a change: whether the next round looks at everything (a heartbeat, or
        polling), and which sources' captures moved."""
        listeners = self._listeners or {}
        if self._polling():
            self._stop.wait(self.poll_interval_s)
            for listener in listeners.values():
                listener.drain()
            return True, frozenset()
        # Anchored to the last confirmation, not to this wait: rounds a NOTIFY woke confirm
        # nothing, so a wait restarted after each of them could pass the lag bound.
        deadline = min(time.monotonic(), self.health.last_ok) + self.heartbeat_s
        while True:
            # A capture this worker leads wakes nobody (writers do not NOTIFY): look at its
            # head every poll interval; the registry's NOTIFY still wakes the worker at once.
            polled = {n: x for n, x in listeners.items() if _polls(x)}
            settling = time.monotonic() < self._settle_until
            left = deadline - time.monotonic()
            step = (
                min(self._settle_step, self.poll_interval_s) if settling else self.poll_interval_s
            )
            timeout = min(left, step) if polled or settling else left
            ready, _, _ = select.select(
                [x.fileno() for x in listeners.values()], [], [], max(0.0, timeout)
            )
            fired = {
                name
                for name, listener in listeners.items()
                if listener.fileno() in ready and listener.drain()
            }
            if any(isinstance(listeners[name], FileWakeup) for name in fired):
                self._settle_until = time.monotonic() + SETTLE_POLLS * self.poll_interval_s
                self._settle_step = SETTLE_FIRST_S
            fired |= {name for name, listener in polled.items() if listener.changed()}
            fired.discard("")
            if ready or fired:
                self._bid(listeners)
                return False, frozenset(fired)
            if settling or time.monotonic() >= deadline or self._stop.is_set():
                self._settle_step *= 2  # a settling look reads all (unless its probes say quiet)
                break
        self._bid(listeners)
        return True, frozenset()

    def _bid(self, listeners: dict[str, Wakeup]) -> None:
        """Once a heartbeat, bid for the lead of every capture this worker does not lead (a dead
        leader's session released it). Not only when a wait times out: while other workers'
        registry commits keep waking this one, a wait may never time out."""
        now = time.monotonic()
        if now - self._bid_at < self.heartbeat_s:
            return
        self._bid_at = now
        for listener in listeners.values():
            lead = getattr(listener, "try_lead", None)
            if lead is not None:
                lead()

    def _owners(self) -> list[tuple[str, object]]:
        owners = [("", self.store)] if self.store is not None else []
        return owners + [(source.name, source) for source in self.sources]

    def _close_listeners(self) -> None:
        for listener in (self._listeners or {}).values():
            _close_quietly(listener)
        self._listeners = None

    def _ok(self, started: float) -> None:
        if not self.health.available or self.failures:
            logger.warning(
                "registry reachable again after %d failed attempt(s); serving", self.failures
            )
        self.failures = 0
        self.health = Health(True, None, started)

    def _failed(self, exc: Exception) -> None:
        """A round failed: unavailable at once; reconnect everything after a backoff."""
        reason = _one_line(exc)
        if self.health.available:
            logger.error("registry unavailable, answering 503: %s", reason)
        self.health = Health(False, reason, self.health.last_ok)
        self._retry()

    def _listener_failed(self, exc: Exception) -> None:
        """A wake-up connection failed: still available within the lag bound; reconnect."""
        logger.warning("lost a wake-up connection (%s); reconnecting", _one_line(exc))
        self._retry()

    def _retry(self) -> None:
        self._close_listeners()
        self._quiet.reset()
        self.failures += 1
        self._stop.wait(backoff(self.failures, self.retry_base_s, self.retry_max_s, self._rng))


def watch(follower: Follower) -> None:
    """The watchdog: once per turn that outlasts ``stall_timeout_s``, break the connections the
    loop may be waiting on (it runs beside the loop; the loop's own locks may be held). A batch
    of a backlog the loop commits counts as a turn (``Follower._ingest``)."""
    broken_turn = None
    while not follower._stop.wait(min(1.0, follower.stall_timeout_s / 4)):
        turned = follower._turned
        stalled = time.monotonic() - turned
        if stalled < follower.stall_timeout_s or turned == broken_turn:
            continue
        broken_turn = turned
        follower.stalls += 1
        logger.error(
            "the follower has waited %.1f s on a database call (a silent link?); breaking "
            "its connections to reconnect",
            stalled,
        )
        owners = [owner for _, owner in follower._owners()]
        for owner in [*owners, *(follower._listeners or {}).values()]:
            interrupt = getattr(owner, "interrupt", None)
            if interrupt is not None:
                try:
                    interrupt()
                except Exception:  # noqa: BLE001 - best effort; the next turn retries
                    logger.exception("could not break a stalled connection")


def _progress(follower: Follower, source: ChangeSource, waiting: int | None) -> None:
    """A batch of a backlog is committed: a turn of the loop; ``waiting`` records left."""
    follower._turned = time.monotonic()
    follower.backlog = {**follower.backlog, source.name: waiting}
    logger.info("%s: catching up, %s capture records wait", source.name, waiting)


def _catching_up(backlog: dict[str, int | None]) -> str:
    return "".join(
        f"; catching up with {name}: {'some' if waiting is None else waiting} capture records wait"
        for name, waiting in sorted(backlog.items())
    )


def open_listeners(owners: list[tuple[str, object]]) -> dict[str, Wakeup]:
    """One per database that can wake a worker: "" for the store, else the source's name."""
    listeners: dict[str, Wakeup] = {}
    try:
        for name, owner in owners:
            make = getattr(owner, "listener", None)
            listener = make() if make is not None else None
            if listener is not None:
                listeners[name] = listener
    except BaseException:
        for listener in listeners.values():
            _close_quietly(listener)
        raise
    return listeners


def _polls(listener: Wakeup | None) -> TypeGuard[LeadWakeup]:
    """Whether ``listener`` is a capture lead held by this worker (it polls the capture)."""
    polls = getattr(listener, "changed", None) is not None
    return polls and bool(getattr(listener, "leader", False))


def _close_quietly(listener: Wakeup) -> None:
    try:
        listener.close()
    except Exception:  # noqa: S110 - a broken connection closes as best it can
        pass


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
