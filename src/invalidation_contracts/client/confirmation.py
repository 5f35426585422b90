"""Confirmed before served: no fix of an origin is served until this process has checked it.

A memory that outlives a process (a store file, a database) holds entries stamped by a history the
server may have moved on from while no one was listening. Under a detection that claims to be
eager (``eager``, ``resync``), the first time this process sees an origin whose memory already
holds entries — and again whenever an adapter says its connection to the origin (re)opened — the
origin is *unconfirmed*: lookups serve none of its entries and every call asks for one conditional
read of the position, ``FetchChanges(since=<stored position>)``. The origin is confirmed by the
first answer that says what moved since the stored position: a changes feed, a 410 (resync), or
a response whose stamps were read at or past the position. A read that fails leaves the origin
unconfirmed (the entries stay withheld, never served on faith).

A change *announced* by the server (a ``resources/updated`` notification, a watch stream's
``versions`` event) gates the origin the same way from the moment the adapter hears it, so no
lookup serves a fix the announced change may have made stale while the diff is being read: with
the announced position known, until the memory's position reaches it (from then on the moved
tables' entries are withheld until the feed is applied, as for any move); with no position, until
the next call that confirms the origin (issue 38: the drift window goes to 0).
"""

from __future__ import annotations

import threading

from .events import FetchChanges
from .shared.ledger import Ledger
from .state import OriginState

#: An announced change: the position it announced, or None when the announcement carried none.
Target = tuple[int, str] | None


class Confirmations:
    """The origins this process must confirm before serving their entries."""

    def __init__(self, *, active: bool) -> None:
        self.active = active
        """False under lazy detection or a strategy that never invalidates: nothing is gated."""
        self._unconfirmed: set[str] = set()
        self._seen: set[str] = set()
        self._announced: dict[str, Target] = {}
        self._lock = threading.Lock()

    def first_sight(self, origin: str, holds_entries: bool) -> None:
        """The origin's memory was read for the first time in this process."""
        with self._lock:
            if origin in self._seen:
                return
            self._seen.add(origin)
            if self.active and holds_entries:
                self._unconfirmed.add(origin)

    def reopened(self, origin: str) -> None:
        """A connection to the origin (re)opened: what it missed must be read before serving."""
        if self.active:
            with self._lock:
                self._seen.add(origin)
                self._unconfirmed.add(origin)

    def announce(self, origin: str, seq: int | None = None, epoch: str | None = None) -> None:
        """The server announced a change of the origin (at ``seq`` of ``epoch`` when it said
        which): serve none of its entries until the memory has read past the announcement."""
        if not self.active:
            return
        target: Target = (seq, epoch) if seq is not None and epoch is not None else None
        with self._lock:
            self._seen.add(origin)
            held = self._announced.get(origin)
            if target is not None and held is not None and target[1] == held[1]:
                target = max(target, held)  # the furthest announced position is the bar
            self._announced[origin] = target  # no position: the next confirming read settles

    def pending(self, tx: Ledger) -> bool:
        """Whether ``tx``'s origin holds entries this process has not confirmed, or that a change
        announced since may have made stale."""
        if not (self.active and tx.state.policy is None and len(tx.index) > 0):
            return False  # a contract-less origin has no position to confirm
        with self._lock:
            unconfirmed = tx.origin in self._unconfirmed
            announced = tx.origin in self._announced
            target = self._announced.get(tx.origin)
        if unconfirmed and not tx.confirmed:
            return True
        if not announced:
            return False
        return not tx.confirmed if target is None else not _reached(tx.state, target)

    def need(self, tx: Ledger) -> FetchChanges:
        """The conditional read that confirms the origin: what changed since the stored position."""
        st = tx.state
        since = st.synced_seq if st.synced_seq is not None else (st.known_seq or 0)
        return FetchChanges(tx.origin, since, st.epoch)

    def settle(self, origin: str, confirms: bool, state: OriginState | None = None) -> None:
        """After a committed call: the origin is confirmed if the call confirmed it, or if it
        holds nothing any more (there is nothing left to serve on faith); an announcement is
        settled once the committed ``state`` reached its position (or, without one, on confirm)."""
        with self._lock:
            if confirms:
                self._unconfirmed.discard(origin)
            if origin not in self._announced:
                return
            target = self._announced[origin]
            if (confirms and target is None) or (
                target is not None and state is not None and _reached(state, target)
            ):
                del self._announced[origin]

    def is_unconfirmed(self, origin: str) -> bool:
        with self._lock:
            return origin in self._unconfirmed or origin in self._announced


def _reached(state: OriginState, target: tuple[int, str]) -> bool:
    """Whether ``state`` has read the announced position, in its epoch."""
    seq, epoch = target
    return state.epoch == epoch and state.known_seq is not None and state.known_seq >= seq
