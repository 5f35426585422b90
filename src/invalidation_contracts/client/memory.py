"""The cross-episode fix memory: a sans-IO core that learns fixes and keeps them honest.

``FixMemory`` never performs network I/O. It is driven with what an HTTP client saw
(``observe``), asked what to inject (``lookup``/``relevant``), and answers every call with an
``Observation``: typed events (stored, served, evicted, restamped, refused, ...) and needs
(``FetchChanges``, ``FetchRules``) that an adapter — the httpx transport, or the evaluation
harness — fulfils and feeds back (``answer``, or ``apply_changes``, ``apply_rules``,
``resync_required``, ``need_failed``, ``fetch_failed``). The async twins (``aobserve``,
``alookup``, ...) run the same calls with the store's I/O off the event loop.

``FixMemory`` is a front over rooms: ``Signals`` (what the server says), ``Serving`` (lookups and
patches), ``Transactions`` (one call end to end), ``Invalidation`` (the contract fold, the strategy,
the trust bound), ``Admission`` (which fixes are learned, within ``Limits``), ``Replicas`` (this
process's copies of what the store holds).

**Shared memory.** Threads, processes and machines may share one store (an ``SQLiteStore`` file,
a ``PostgresStore`` database). A call is computed against the memory's replica of the origin and
written as one batch, on the condition that the origin's generation has not moved; a call that
lost the race to another writer is recomputed on what that writer committed. Each call first makes
sure the replica is current, so no process serves an entry another has evicted, and entry ids are
unique across all of them. Every origin is separate: a response from one origin never evicts or
restamps another's entries.

**Reads do no I/O.** When the store's change token has not moved, a lookup or a steady observe
touches no store at all; counters are written with the next real write, or by ``close``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from os import PathLike
from typing import Any, Self

from ..protocol.models import ChangesFeed, RulesListing
from .admission import Admission
from .aio import AsyncCalls, conditional_headers, nothing
from .aio_surface import AsyncSurface
from .confirmation import Confirmations
from .detection import Detection
from .entries import EvictionReason, MemoryEntry, Tombstone
from .events import Need, Observation
from .invalidation import Invalidation
from .layout import load_tombstones, stored_origins
from .limits import DEFAULT_LIMITS, Limits, Refusal
from .replica import Replicas
from .serving import Lookup, PatchOutcome, Serving
from .signals import Response, Signals
from .state import OriginState
from .stats import OriginStats
from .steps import run_sync
from .stores import InMemoryStore, SQLiteStore, Store
from .strategies import Strategy, strategy_for
from .transaction import Transactions
from .trust import TrustPolicy

__all__ = ["FixMemory", "Lookup", "PatchOutcome"]


class FixMemory(AsyncCalls, AsyncSurface):
    """A fix memory with one invalidation strategy and one detection policy over one store.

    ``strategy``: a name (``"row"``), an arm code (``"A2D"``) or a ``Strategy``.
    ``detection``: ``"eager"`` (default), ``"lazy"`` or ``"resync"``.
    ``store``: a ``Store``; a path opens an ``SQLiteStore`` there; ``None`` keeps it in memory.
    ``close_store``: whether ``close()`` closes the store (default: when the memory opened it).
    ``trust``: the defences against a dishonest server (``TrustPolicy``); default: none.
    ``limits``: the caps on what a server controls (``Limits``); default: ``Limits()``.
    """

    def __init__(
        self,
        strategy: str | Strategy | type[Strategy] = "row",
        detection: str | Detection = "eager",
        store: Store | str | PathLike[str] | None = None,
        *,
        clock: Callable[[], float] = time.time,
        close_store: bool | None = None,
        trust: TrustPolicy | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.strategy = strategy_for(strategy)
        self.trust = trust if trust is not None else TrustPolicy()
        self.detection = Detection.parse(detection)
        self.limits = limits if limits is not None else DEFAULT_LIMITS
        self._owns_store = not isinstance(store, Store) if close_store is None else close_store
        if store is None:
            store = InMemoryStore()
        elif not isinstance(store, Store):
            store = SQLiteStore(store)
        self.store = store
        lock = threading.RLock()
        invalidation = Invalidation(self.strategy, self.trust)
        admission = Admission(invalidation, self.trust, self.limits)
        confirmations = Confirmations(
            active=self.strategy.invalidates and self.detection is not Detection.LAZY
        )
        self._calls = Transactions(
            Replicas(store, lock),
            invalidation,
            admission,
            lock=lock,
            clock=clock,
            confirmations=confirmations,
        )
        self._signals = Signals(
            self._calls,
            invalidation,
            admission,
            detection=self.detection,
            trust=self.trust,
            limits=self.limits,
        )
        self._serving = Serving(self._calls, self.strategy, self.trust)

    # ------------------------------------------------------------------ driving the memory

    def begin_episode(self, origin: str, episode: int) -> list[Need]:
        """Mark the start of an episode; returns what must be fetched before memory is used.

        Under ``resync`` detection this asks for the changes feed since the last position; under
        any detection it repeats needs still outstanding.
        """
        return run_sync(self.store, self._signals.begin_episode(origin, episode))

    def needs(self, origin: str) -> list[Need]:
        """What must be fetched and answered before the memory serves all it holds of ``origin``.

        Under eager or resync detection this includes, until this process has confirmed the
        origin, one conditional read of what changed since the stored position
        (``client.confirmation``): adapters fulfil it when a connection opens.
        """
        call = run_sync(self.store, self._calls.run(origin, None, nothing))
        return list(call.needs)

    def reopened(self, origin: str) -> None:
        """A connection to ``origin`` (re)opened: serve none of its entries until the position
        is confirmed again (what moved while it was closed is read first)."""
        self._calls.confirmations.reopened(origin)

    def lookup(
        self,
        origin: str,
        draft: Mapping[str, Any],
        *,
        episode: int | None = None,
        operation: str | None = None,
    ) -> Lookup:
        """The entries of ``operation`` relevant to a draft (every scope field equal).

        Counted as a hit or a miss. Expired entries (``max_age_s``) are evicted; entries awaiting
        a diff are withheld, and so are all of an origin's entries until this process has
        confirmed it (``needs``; ``Lookup.needs`` says what to fetch).
        """
        return run_sync(self.store, self._serving.lookup(origin, draft, episode, operation))

    def relevant(
        self,
        origin: str,
        draft: Mapping[str, Any],
        *,
        episode: int | None = None,
        operation: str | None = None,
    ) -> list[MemoryEntry]:
        """``lookup(...).entries`` as a list: the entries to inject into this draft."""
        return list(self.lookup(origin, draft, episode=episode, operation=operation).entries)

    def fixes_for(
        self, origin: str, operation: str, *, episode: int | None = None
    ) -> list[MemoryEntry]:
        """Every fix of ``operation`` the memory would serve, whatever the draft: for a prompt
        written before the model has drafted a call (L2 lists each with its condition). Entries
        the strategy withholds or the trust policy refuses are left out, as from a lookup."""
        steps = self._serving.fixes_for(origin, episode, operation)
        return list(run_sync(self.store, steps).entries)

    def observe(
        self,
        origin: str,
        request: Mapping[str, Any] | None,
        status: int,
        body: Mapping[str, Any] | None,
        *,
        episode: int | None = None,
        injected: Iterable[str] = (),
        delta_since: int | None = None,
        response_bytes: int | None = None,
        contract_bytes: int | None = None,
        response_id: str | None = None,
        signature: str | None = None,
        operation: str | None = None,
        refused: Refusal | None = None,
    ) -> Observation:
        """Feed one response from ``origin`` to the memory.

        ``request``: the request as sent (None: unknown); a fix is learned only if its scope
        matches it. ``operation``: the request's method and route template, or tool name (None:
        the unnamed operation); fixes are keyed by it. ``injected``: ids of the entries put into
        this request (new fixes record them as ``derived_from``). ``delta_since``: the
        ``Contract-Since`` the server echoed, when it did — then ``table_versions`` lists only
        tables changed after it. ``signature``: the response's ``Contract-Signature``, checked
        against ``body`` as received when the trust policy has keys. ``response_bytes``: the
        body's size; over ``limits.max_body_bytes`` its contract is not read.
        ``contract_bytes``: the body's contract bytes when the caller measured them already
        (``protocol.wirecost``); else the memory measures them. ``refused``: a bound the body
        broke while the caller read it (decoding ratio, nesting depth, decoded size): the
        response is then counted, the refusal reported, and nothing of it read.
        """
        response = Response(
            request,
            status,
            body,
            tuple(injected),
            delta_since,
            response_bytes,
            contract_bytes,
            response_id,
            signature,
            refused,
        )
        return run_sync(self.store, self._signals.observe(origin, response, episode, operation))

    def apply_changes(
        self,
        origin: str,
        feed: ChangesFeed | Mapping[str, Any],
        *,
        episode: int | None = None,
        signature: str | None = None,
    ) -> Observation:
        """Feed a ``GET /contract/changes`` answer (a ``FetchChanges`` need fulfilled).

        ``signature``: its ``Contract-Signature``; pass the body as received (a mapping) for it.
        A feed over ``limits.max_feed_items`` is not read: it is treated as lost history.
        """
        return run_sync(self.store, self._signals.apply_changes(origin, feed, episode, signature))

    def apply_rules(
        self,
        origin: str,
        listing: RulesListing | Mapping[str, Any],
        *,
        episode: int | None = None,
        signature: str | None = None,
    ) -> Observation:
        """Feed a ``GET /contract/rules`` answer (a ``FetchRules`` need fulfilled)."""
        return run_sync(self.store, self._signals.apply_rules(origin, listing, episode, signature))

    def resync_required(
        self,
        origin: str,
        *,
        episode: int | None = None,
        problem: Mapping[str, Any] | None = None,
        signature: str | None = None,
    ) -> Observation:
        """The server answered 410 resync-required: evict all its entries (reason resync).

        ``problem`` and ``signature``: the 410 body and its ``Contract-Signature``, checked when
        the trust policy has keys.
        """
        steps = self._signals.resync_required(origin, episode, problem, signature)
        return run_sync(self.store, steps)

    def answer(
        self,
        need: Need,
        status: int,
        body: Any,
        *,
        episode: int | None = None,
        signature: str | None = None,
        body_bytes: int | None = None,
        refused: Refusal | None = None,
    ) -> Observation:
        """Feed the HTTP answer to a need, whatever it was: the one call an adapter makes.

        410 → ``resync_required``; 200 with a valid body → ``apply_changes`` / ``apply_rules``;
        anything else (another status, a body that does not parse) → ``need_failed``.
        ``body_bytes``: the answer's size (at least, when reading stopped at the cap); over
        ``limits.max_feed_bytes`` the answer is refused unread, and a changes feed is treated as
        lost history (a resync; with ``require_signatures``, as an unverified answer).
        """
        steps = self._signals.answer(need, status, body, episode, signature, body_bytes, refused)
        return run_sync(self.store, steps)

    def need_failed(self, need: Need, *, episode: int | None = None) -> Observation:
        """A need could not be fulfilled (not served, or not understood): fall back conservatively.

        No changes feed: entries on moved tables are evicted at table granularity. No rule
        listing: rule-dependent entries under the old stamp are evicted. (A network error is not
        a failure: report it with ``fetch_failed`` and the need stays outstanding.)
        """
        return run_sync(self.store, self._signals.need_failed(need, episode))

    def fetch_failed(self, need: Need, detail: str, *, episode: int | None = None) -> Observation:
        """A need could not be fetched (a network error): report it, change nothing.

        The need stays outstanding and is asked again; the ``FetchFailed`` event lists the
        entries withheld until it is fulfilled, and a warning is logged.
        """
        return run_sync(self.store, self._signals.fetch_failed(need, detail, episode))

    def evict(
        self,
        origin: str,
        *,
        entry_ids: Iterable[str] = (),
        table: str | None = None,
        everything: bool = False,
        reason: EvictionReason = EvictionReason.OPERATOR,
        detail: str = "evicted by an operator",
        episode: int | None = None,
    ) -> Observation:
        """Evict entries by id, by table, or all of an origin's; ids not live are ignored."""
        targets = None if everything or table is not None else entry_ids
        by_table = None if everything else table
        steps = self._signals.evict(origin, targets, by_table, reason, detail, episode)
        return run_sync(self.store, steps)

    # ------------------------------------------------------------------ client apply mode

    def set_patchable(self, origin: str, paths: Iterable[str]) -> None:
        """Record the request paths ``origin`` lets the client patch.

        Each is a JSON Pointer (``/metadata/note``) or a top-level field name (``promo_code``).
        """
        run_sync(self.store, self._serving.set_patchable(origin, paths))

    def apply_patches(
        self,
        origin: str,
        request: Mapping[str, Any],
        entries: Sequence[MemoryEntry],
        *,
        episode: int | None = None,
        operation: str | None = None,
    ) -> PatchOutcome:
        """Apply each entry's cached patch, in order, to a copy of the planned request.

        Each patch is preceded by a ``test`` of every scope field, so an entry applies only to a
        request its scope matches (one selected on the task's draft may not fit what the planner
        planned); an entry of another ``operation``, or no longer live, is skipped. A patch that
        copies, moves or writes outside the origin's patchable paths is refused and its entry
        quarantined. Raises ``ValueError`` if the origin has no published patchable paths.
        """
        steps = self._serving.apply_patches(origin, request, entries, episode, operation)
        return run_sync(self.store, steps)

    # ------------------------------------------------------------------ reading the memory

    def entries(self, origin: str) -> list[MemoryEntry]:
        """The origin's live entries, in the order they were stored."""
        replica = run_sync(self.store, self._calls.fresh(origin))
        with self._calls.lock:
            return list(replica.index)

    def tombstones(self, origin: str) -> list[Tombstone]:
        """The origin's evicted entries, in the order they were evicted (read from the store)."""
        return load_tombstones(self.store, origin)

    def stats(self, origin: str) -> OriginStats:
        """A copy of the origin's counters: as committed, plus this process's unwritten ones."""
        replica = run_sync(self.store, self._calls.fresh(origin))
        with self._calls.lock:
            return replica.counters

    def state(self, origin: str) -> OriginState:
        """A copy of what the memory knows of the origin's contract."""
        replica = run_sync(self.store, self._calls.fresh(origin))
        with self._calls.lock:
            return replica.state.copy()

    def origins(self) -> list[str]:
        """Every origin the store holds a memory of."""
        return stored_origins(self.store)

    def contract_since(self, origin: str) -> int | None:
        """The ``Contract-Since`` to send: the seq the memory's known versions are accurate at."""
        if not self.strategy.invalidates:
            return None
        return self.state(origin).known_seq

    def conditional_headers(self, origin: str) -> dict[str, str]:
        """The conditional contract's request headers: ``Contract-Since`` and ``Contract-Epoch``.

        Empty until the memory knows a position; the server then answers only what moved after it.
        """
        if not self.strategy.invalidates:
            return {}
        state = self.state(origin)
        return conditional_headers(state.known_seq, state.epoch)

    def close(self) -> None:
        """Write the counters not yet written, then close the store if this memory opened it."""
        try:
            for origin in self._calls.unflushed():
                run_sync(self.store, self._calls.flush(origin))
        finally:
            if self._owns_store:
                self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
