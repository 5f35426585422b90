"""The follower: a worker's background thread that keeps its registry at the shared head.

It wakes on PostgreSQL ``NOTIFY`` (or polls SQLite), adopts what other workers committed and,
as the leader of a source, consumes its new captures (``ingest``). While it cannot reach the
databases, the worker is *unavailable*: the HTTP layer answers 503 rather than stamps it cannot
vouch for.
"""

from __future__ import annotations

import logging
import select
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from .ingest import ingest
from .registry import Registry

logger = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL_S = 0.02
"""How often a worker looks for changes where it cannot be woken (SQLite)."""
DEFAULT_HEARTBEAT_S = 1.0
"""How often a worker that is woken by NOTIFY checks the databases anyway."""
DEFAULT_STALE_AFTER_S = 10.0
"""A worker whose last successful check is older than this answers 503."""


class Listener(Protocol):
    def fileno(self) -> int: ...

    def drain(self) -> bool: ...

    def close(self) -> None: ...


@dataclass
class Health:
    """Whether this worker can vouch for its state, and why not."""

    available: bool = True
    reason: str | None = None
    last_ok: float = field(default_factory=time.monotonic)


class Follower:
    """Keeps a worker's registry at the shared head; a daemon thread started with the app."""

    def __init__(
        self,
        registry: Registry,
        sources: tuple[Any, ...] = (),
        *,
        store: Any = None,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        stale_after_s: float = DEFAULT_STALE_AFTER_S,
    ) -> None:
        self.registry = registry
        self.sources = sources
        self.store = store
        self.poll_interval_s = poll_interval_s
        self.heartbeat_s = heartbeat_s
        self.stale_after_s = stale_after_s
        self.health = Health()
        self._seen: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listeners: dict[str, Listener] | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="invalidation-contracts-follower", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        self._close_listeners()

    @property
    def available(self) -> bool:
        health = self.health
        fresh = time.monotonic() - health.last_ok < self.stale_after_s
        return health.available and (fresh or self._thread is None)

    @property
    def reason(self) -> str | None:
        if self.health.reason is not None:
            return self.health.reason
        return None if self.available else "the registry has not been checked recently"

    def check(self, *, everything: bool = True, notified: frozenset[str] = frozenset()) -> None:
        """One round: consume new captures (as the leader, or ``everything``), else catch up.

        Raises when a database fails. ``notified``: sources whose capture just signalled a change
        (no need to read their head first).
        """
        ingested = False
        for source in self.sources:
            if source.name in notified:
                ingest(self.registry, source)  # catches up under the write lock
                self._seen[source.name] = self.registry.position(source.name) or 0
                ingested = True
                continue
            if not (everything or self._leads(source)):
                continue
            head = source.head()
            if head != self._seen.get(source.name):
                ingest(self.registry, source, head=head)
                self._seen[source.name] = head
                ingested = True
        if not ingested:
            self.registry.sync()

    def _leads(self, source: Any) -> bool:
        listener = (self._listeners or {}).get(source.name)
        return listener is None or bool(getattr(listener, "leader", True))

    def _run(self) -> None:
        everything, notified = True, frozenset[str]()
        while not self._stop.is_set():
            try:
                if self._listeners is None:
                    self._listeners = self._open_listeners()
                self.check(everything=everything, notified=notified)
            except Exception as exc:  # a worker must keep trying, and say why it cannot serve
                self._failed(exc)
                self._close_listeners()
                self._stop.wait(min(1.0, 10 * self.poll_interval_s))
                everything, notified = True, frozenset()
                continue
            self._ok()
            everything, notified = self._wait()

    def _wait(self) -> tuple[bool, frozenset[str]]:
        """Wait for a change: whether the next round looks at everything (a timeout, or polling),
        and which sources' captures signalled."""
        listeners = self._listeners or {}
        if any(listeners.get(name) is None for name, _ in self._owners()):
            self._stop.wait(self.poll_interval_s)
            for listener in listeners.values():
                listener.drain()
            return True, frozenset()
        ready, _, _ = select.select(
            [x.fileno() for x in listeners.values()], [], [], self.heartbeat_s
        )
        fired = frozenset(
            name
            for name, listener in listeners.items()
            if listener.fileno() in ready and listener.drain()
        )
        if not ready:
            for listener in listeners.values():
                lead = getattr(listener, "try_lead", None)
                if lead is not None:
                    lead()
        return not ready, fired - {""}

    def _open_listeners(self) -> dict[str, Listener]:
        """One per database that can wake this worker: "" for the store, else the source's name."""
        listeners: dict[str, Listener] = {}
        for name, owner in self._owners():
            make = getattr(owner, "listener", None)
            listener = make() if make is not None else None
            if listener is not None:
                listeners[name] = listener
        return listeners

    def _owners(self) -> list[tuple[str, Any]]:
        owners = [("", self.store)] if self.store is not None else []
        return owners + [(source.name, source) for source in self.sources]

    def _close_listeners(self) -> None:
        for listener in (self._listeners or {}).values():
            try:
                listener.close()
            except Exception:  # noqa: S110 - a broken connection closes as best it can
                pass
        self._listeners = None

    def _ok(self) -> None:
        if not self.health.available:
            logger.warning("registry reachable again; serving")
        self.health = Health(True, None, time.monotonic())

    def _failed(self, exc: Exception) -> None:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if self.health.available:
            logger.error("registry unavailable, answering 503: %s", reason)
        self.health = Health(False, reason, self.health.last_ok)
