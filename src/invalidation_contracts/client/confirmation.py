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
"""

from __future__ import annotations

import threading

from .events import FetchChanges
from .ledger import Ledger


class Confirmations:
    """The origins this process must confirm before serving their entries."""

    def __init__(self, *, active: bool) -> None:
        self.active = active
        """False under lazy detection or a strategy that never invalidates: nothing is gated."""
        self._unconfirmed: set[str] = set()
        self._seen: set[str] = set()
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

    def pending(self, tx: Ledger) -> bool:
        """Whether ``tx``'s origin holds entries this process has not confirmed."""
        return (
            self.active
            and not tx.confirmed
            and tx.state.policy is None  # a contract-less origin has no position to confirm
            and tx.origin in self._unconfirmed
            and len(tx.index) > 0
        )

    def need(self, tx: Ledger) -> FetchChanges:
        """The conditional read that confirms the origin: what changed since the stored position."""
        st = tx.state
        since = st.synced_seq if st.synced_seq is not None else (st.known_seq or 0)
        return FetchChanges(tx.origin, since, st.epoch)

    def settle(self, origin: str, confirms: bool) -> None:
        """After a committed call: the origin is confirmed if the call confirmed it, or if it
        holds nothing any more (there is nothing left to serve on faith)."""
        if confirms:
            with self._lock:
                self._unconfirmed.discard(origin)

    def is_unconfirmed(self, origin: str) -> bool:
        with self._lock:
            return origin in self._unconfirmed
