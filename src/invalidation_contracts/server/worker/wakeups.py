"""What wakes a worker between rounds: one connection per database that can signal a commit
(the registry's PostgreSQL ``NOTIFY``, a SQLite file's inotify descriptor, a capture's lead), a
poll every interval for the rest, and the bids for the lead of each capture.

``Wakeups.wait`` returns whether the next round reads every database (a heartbeat, or polling)
and which sources' captures moved. After an inotify event it keeps looking for a few poll
intervals (``SETTLE_POLLS``): a SQLite WAL commit becomes visible only after its last write.
"""

from __future__ import annotations

import select
import threading
import time
from typing import TYPE_CHECKING, TypeGuard

from ..store.inotify import FileWakeup

if TYPE_CHECKING:
    from ..capture.source import LeadWakeup, Wakeup

SETTLE_POLLS = 5
"""After an event on a SQLite file, a worker looks again for this many poll intervals: a WAL
commit becomes visible (in the shared-memory index, which inotify does not see) only after its
last write to the file (and its fsync), so the round that write woke may read before it. The looks
start ``SETTLE_FIRST_S`` after the event and double up to the poll interval."""
SETTLE_FIRST_S = 0.001


class Wakeups:
    """The wake-up connections of ``owners`` (``(name, database)``: "" for the registry's store,
    else a source's name), opened on demand and closed after a failure."""

    def __init__(
        self,
        owners: list[tuple[str, object]],
        *,
        poll_interval_s: float,
        heartbeat_s: float,
        stop: threading.Event,
    ) -> None:
        self.owners = owners
        self.poll_interval_s = poll_interval_s
        self.heartbeat_s = heartbeat_s
        self.listeners: dict[str, Wakeup] | None = None
        self._stop = stop
        self._bid_at = float("-inf")
        self._settle_until, self._settle_step = float("-inf"), SETTLE_FIRST_S

    def open(self) -> None:
        """Open the connections unless they are open (after a failure they are not)."""
        if self.listeners is None:
            self.listeners = open_listeners(self.owners)

    def close(self) -> None:
        for listener in (self.listeners or {}).values():
            _close_quietly(listener)
        self.listeners = None

    def leads(self, name: str) -> bool:
        """Whether this worker leads source ``name``'s capture (no lead to bid for: it does)."""
        listener = (self.listeners or {}).get(name)
        return listener is None or bool(getattr(listener, "leader", True))

    def polls(self, name: str) -> bool:
        """Whether ``wait`` looks at source ``name``'s capture head every poll interval (so a
        round that is not told it moved need not read it)."""
        return _polls((self.listeners or {}).get(name))

    def looked(self, name: str) -> int | None:
        """The capture head of source ``name`` at this worker's last look as its leader (None:
        it does not lead it, or has not looked)."""
        listener = (self.listeners or {}).get(name)
        return getattr(listener, "head", None) if _polls(listener) else None

    def polling(self) -> bool:
        """Whether some database cannot wake this worker (SQLite it cannot watch): it then polls
        them all every poll interval, and a round may skip reading (``QuietCheck``)."""
        listeners = self.listeners or {}
        return any(listeners.get(name) is None for name, _ in self.owners)

    def settling(self, now: float) -> bool:
        """Whether ``now`` is within the looks that follow an inotify event."""
        return now < self._settle_until

    def wait(self, last_ok: float) -> tuple[bool, frozenset[str]]:
        """Wait for a change: whether the next round looks at everything (a heartbeat, or
        polling), and which sources' captures moved. ``last_ok``: the last confirmation."""
        listeners = self.listeners or {}
        if self.polling():
            self._stop.wait(self.poll_interval_s)
            for listener in listeners.values():
                listener.drain()
            return True, frozenset()
        # Anchored to the last confirmation, not to this wait: rounds a NOTIFY woke confirm
        # nothing, so a wait restarted after each of them could pass the lag bound.
        deadline = min(time.monotonic(), last_ok) + self.heartbeat_s
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
