"""The cross-episode fix memory: a sans-IO core that learns fixes and keeps them honest.

``FixMemory`` never performs network I/O. It is driven with what an HTTP client saw
(``observe``), asked what to inject (``lookup``/``relevant``), and answers every call with an
``Observation``: typed events (stored, served, evicted, restamped, refused, ...) and needs
(``FetchChanges``, ``FetchRules``) that an adapter — the httpx transport, or the evaluation
harness — fulfils and feeds back (``answer``, or ``apply_changes``, ``apply_rules``,
``resync_required``, ``need_failed``, ``fetch_failed``). Every call has an async twin
(``aobserve``, ``alookup``, ...) whose store I/O never blocks the event loop.

The front holds the rooms together: ``Invalidation`` (the contract fold, the strategy, the trust
bound), ``Admission`` (which fixes are learned, within ``Limits``), ``wire`` (reading bodies) and
``Replicas`` (this process's copies of what the store holds).

**Shared memory.** Threads, processes and machines may share one store (an ``SQLiteStore`` file,
a ``PostgresStore`` database). A call is computed against the memory's replica of the origin and
written as one batch, on the condition that the origin's generation has not moved; a call that
lost the race to another writer is recomputed on what that writer committed. Each call first
makes sure the replica is current, so no process serves an entry another has evicted, and entry
ids are unique across all of them. Every origin is separate: a response from one origin never
evicts or restamps another's entries.

**Reads do no I/O.** When the store's change token has not moved, a lookup or a steady observe
touches no store at all; counters are written with the next real write, or by ``close``.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from typing import Any, Generic, Self, TypeVar

from pydantic import ValidationError

from ..protocol.models import ChangesFeed, PatchOperation, RulesListing, field_pointer
from .admission import Admission, Lesson
from .detection import Detection
from .entries import EvictionReason, MemoryEntry, Tombstone
from .events import (
    FetchChanges,
    FetchFailed,
    MemoryEvent,
    Need,
    Observation,
    Refused,
    Served,
)
from .invalidation import Invalidation
from .layout import commit_ops, load_tombstones, stored_origins
from .ledger import Ledger
from .limits import DEFAULT_LIMITS, Limits
from .overlay import IndexOverlay
from .patching import PatchRefused, apply_patch, as_pointer
from .replica import Replica, Replicas, Steps
from .state import OriginState
from .stats import OriginStats
from .stats import contract_bytes as measure_contract_bytes
from .stores import InMemoryStore, Result, SQLiteStore, Store, StoreConflict, StoreError
from .strategies import Strategy, strategy_for
from .trust import TrustPolicy
from .wire import feed_items, instance_of, read_contract, read_suggestions, refuse

__all__ = ["FixMemory", "Lookup", "PatchOutcome"]

logger = logging.getLogger("invalidation_contracts.client")
T = TypeVar("T")
#: How often a call is recomputed after losing a race to another writer before it gives up.
MAX_CONFLICTS = 64


@dataclass(frozen=True, slots=True)
class Lookup:
    """What a lookup served, in store order, and the events it caused."""

    entries: tuple[MemoryEntry, ...]
    events: tuple[MemoryEvent, ...]


@dataclass(frozen=True, slots=True)
class PatchOutcome:
    """Client apply mode: the patched request and what happened to each entry."""

    request: dict[str, Any]
    applied: tuple[str, ...]
    """Ids of entries whose patch was applied, in order."""
    skipped: tuple[tuple[str, str], ...]
    """``(entry id, why)`` for entries left to the planner: no patch, or it does not apply here."""
    events: tuple[MemoryEvent, ...]
    """``Quarantined`` events for entries whose patch wrote off-limits."""


@dataclass(frozen=True, slots=True)
class _Call(Generic[T]):
    """One computed call: its ledger, its result, and what it leaves outstanding."""

    tx: Ledger
    result: T
    needs: tuple[Need, ...]

    @property
    def observation(self) -> Observation:
        return Observation(tuple(self.tx.events), self.needs)


class FixMemory:
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
        self.store: Store = store
        self._clock = clock
        self._lock = threading.RLock()
        self._replicas = Replicas(store, self._lock)
        self._invalidation = Invalidation(self.strategy, self.trust)
        self._admission = Admission(self._invalidation, self.trust, self.limits)
        self._lessons: dict[str, list[Lesson]] = {}
        self._episodes: dict[str, int | None] = {}

    # ------------------------------------------------------------------ driving the memory

    def begin_episode(self, origin: str, episode: int) -> list[Need]:
        """Mark the start of an episode; returns what must be fetched before memory is used.

        Under ``resync`` detection this asks for the changes feed since the last position; under
        any detection it repeats needs still outstanding.
        """
        return self._sync(self._begin_episode(origin, episode))

    async def abegin_episode(self, origin: str, episode: int) -> list[Need]:
        return await self._async(self._begin_episode(origin, episode))

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
        a diff are withheld.
        """
        return self._sync(self._lookup(origin, draft, episode, operation))

    async def alookup(
        self,
        origin: str,
        draft: Mapping[str, Any],
        *,
        episode: int | None = None,
        operation: str | None = None,
    ) -> Lookup:
        return await self._async(self._lookup(origin, draft, episode, operation))

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

    async def arelevant(
        self,
        origin: str,
        draft: Mapping[str, Any],
        *,
        episode: int | None = None,
        operation: str | None = None,
    ) -> list[MemoryEntry]:
        found = await self.alookup(origin, draft, episode=episode, operation=operation)
        return list(found.entries)

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
        (``protocol.wirecost``); else the memory measures them.
        """
        return self._sync(
            self._observe(
                origin,
                _Response(
                    request,
                    status,
                    body,
                    tuple(injected),
                    delta_since,
                    response_bytes,
                    contract_bytes,
                    response_id,
                    signature,
                ),
                episode,
                operation,
            )
        )

    async def aobserve(
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
    ) -> Observation:
        response = _Response(
            request,
            status,
            body,
            tuple(injected),
            delta_since,
            response_bytes,
            contract_bytes,
            response_id,
            signature,
        )
        return await self._async(self._observe(origin, response, episode, operation))

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
        return self._sync(self._apply_changes(origin, feed, episode, signature))

    def apply_rules(
        self,
        origin: str,
        listing: RulesListing | Mapping[str, Any],
        *,
        episode: int | None = None,
        signature: str | None = None,
    ) -> Observation:
        """Feed a ``GET /contract/rules`` answer (a ``FetchRules`` need fulfilled)."""
        return self._sync(self._apply_rules(origin, listing, episode, signature))

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
        return self._sync(self._resync_required(origin, episode, problem, signature))

    def answer(
        self,
        need: Need,
        status: int,
        body: Any,
        *,
        episode: int | None = None,
        signature: str | None = None,
        body_bytes: int | None = None,
    ) -> Observation:
        """Feed the HTTP answer to a need, whatever it was: the one call an adapter makes.

        410 → ``resync_required``; 200 with a valid body → ``apply_changes`` / ``apply_rules``;
        anything else (another status, a body that does not parse) → ``need_failed``.
        ``body_bytes``: the answer's size (at least, when reading stopped at the cap); over
        ``limits.max_feed_bytes`` the answer is refused unread, and a changes feed is treated as
        lost history (a resync; with ``require_signatures``, as an unverified answer).
        """
        return self._sync(self._answer(need, status, body, episode, signature, body_bytes))

    async def aanswer(
        self,
        need: Need,
        status: int,
        body: Any,
        *,
        episode: int | None = None,
        signature: str | None = None,
        body_bytes: int | None = None,
    ) -> Observation:
        return await self._async(self._answer(need, status, body, episode, signature, body_bytes))

    def need_failed(self, need: Need, *, episode: int | None = None) -> Observation:
        """A need could not be fulfilled (not served, or not understood): fall back conservatively.

        No changes feed: entries on moved tables are evicted at table granularity. No rule
        listing: rule-dependent entries under the old stamp are evicted. (A network error is not
        a failure: report it with ``fetch_failed`` and the need stays outstanding.)
        """
        return self._sync(self._need_failed(need, episode))

    def fetch_failed(self, need: Need, detail: str, *, episode: int | None = None) -> Observation:
        """A need could not be fetched (a network error): report it, change nothing.

        The need stays outstanding and is asked again; the ``FetchFailed`` event lists the
        entries withheld until it is fulfilled, and a warning is logged.
        """
        return self._sync(self._fetch_failed(need, detail, episode))

    async def afetch_failed(
        self, need: Need, detail: str, *, episode: int | None = None
    ) -> Observation:
        return await self._async(self._fetch_failed(need, detail, episode))

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
        ids = list(dict.fromkeys(entry_ids))

        def work(tx: Ledger) -> None:
            if everything:
                targets = [entry.id for entry in tx.index]
            elif table is not None:
                targets = [entry.id for entry in tx.index.on_table(table)]
            else:
                targets = ids
            for entry_id in targets:
                tx.evict(entry_id, reason, detail)

        return self._sync(self._transaction(origin, episode, work)).observation

    # ------------------------------------------------------------------ client apply mode

    def set_patchable(self, origin: str, paths: Iterable[str]) -> None:
        """Record the request paths ``origin`` lets the client patch.

        Each is a JSON Pointer (``/metadata/note``) or a top-level field name (``promo_code``).
        """
        checked = sorted({as_pointer(path) for path in paths})

        def work(tx: Ledger) -> None:
            tx.state.patchable = checked

        self._sync(self._transaction(origin, None, work))

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
        return self._sync(self._apply_patches(origin, request, entries, episode, operation))

    async def aapply_patches(
        self,
        origin: str,
        request: Mapping[str, Any],
        entries: Sequence[MemoryEntry],
        *,
        episode: int | None = None,
        operation: str | None = None,
    ) -> PatchOutcome:
        return await self._async(self._apply_patches(origin, request, entries, episode, operation))

    # ------------------------------------------------------------------ reading the memory

    def entries(self, origin: str) -> list[MemoryEntry]:
        """The origin's live entries, in the order they were stored."""
        replica = self._sync(self._fresh(origin))
        with self._lock:
            return list(replica.index)

    def tombstones(self, origin: str) -> list[Tombstone]:
        """The origin's evicted entries, in the order they were evicted (read from the store)."""
        return load_tombstones(self.store, origin)

    def stats(self, origin: str) -> OriginStats:
        """A copy of the origin's counters: as committed, plus this process's unwritten ones."""
        replica = self._sync(self._fresh(origin))
        with self._lock:
            return replica.counters

    def state(self, origin: str) -> OriginState:
        """A copy of what the memory knows of the origin's contract."""
        replica = self._sync(self._fresh(origin))
        with self._lock:
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
        return self._headers(self._sync(self._fresh(origin)))

    async def aconditional_headers(self, origin: str) -> dict[str, str]:
        if not self.strategy.invalidates:
            return {}
        return self._headers(await self._async(self._fresh(origin)))

    def close(self) -> None:
        """Write the counters not yet written, then close the store if this memory opened it."""
        try:
            for origin in self._unflushed():
                self._sync(self._flush(origin))
        finally:
            if self._owns_store:
                self.store.close()

    async def aclose(self) -> None:
        try:
            for origin in self._unflushed():
                await self._async(self._flush(origin))
        finally:
            if self._owns_store:
                self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the calls, as steps

    def _begin_episode(self, origin: str, episode: int) -> Steps[list[Need]]:
        with self._lock:
            self._episodes[origin] = episode
        call = yield from self._transaction(origin, episode, _nothing)
        needs = list(call.needs)
        st = call.tx.state
        if (
            self.detection.resyncs_before_episode
            and self.strategy.invalidates
            and len(call.tx.index)
            and not any(isinstance(need, FetchChanges) for need in needs)
        ):
            needs.insert(0, FetchChanges(origin, st.synced_seq or 0, st.epoch))
        return needs

    def _lookup(
        self, origin: str, draft: Mapping[str, Any], episode: int | None, operation: str | None
    ) -> Steps[Lookup]:
        def work(tx: Ledger) -> tuple[MemoryEntry, ...]:
            tx.stats.lookups += 1
            served = []
            if self.strategy.stores:
                matching = tx.index.matching(draft, tx.operation)
                served = [entry for entry in matching if self._serves(tx, entry)]
            for entry in served:
                tx.emit(Served(origin=origin, episode=tx.episode, entry_id=entry.id, key=entry.key))
            if served:
                tx.stats.hits += 1
            else:
                tx.stats.misses += 1
            return tuple(served)

        call = yield from self._transaction(origin, episode, work, operation=operation)
        return Lookup(call.result, tuple(call.tx.events))

    def _serves(self, tx: Ledger, entry: MemoryEntry) -> bool:
        """Whether a lookup may serve a matching entry (quarantining or evicting it otherwise)."""
        if not entry.key.scope_items and not entry.suggestion.origin_wide:
            tx.quarantine(entry.id, "its scope is empty and the server did not mark it origin_wide")
            return False
        if self.trust.guard_parameters:
            refused = self.trust.injection(entry.suggestion, tx.state.patchable)
            if refused is not None:
                tx.quarantine(entry.id, refused)
                return False
        if self.strategy.invalidates:
            expiry = self.trust.expiry(entry, tx.now)
            if expiry is not None:
                tx.evict(entry.id, EvictionReason.MAX_AGE, expiry)
                return False
            if self.strategy.withholds(tx.state, entry):
                return False
        return True

    def _observe(
        self, origin: str, response: _Response, episode: int | None, operation: str | None
    ) -> Steps[Observation]:
        def work(tx: Ledger) -> None:
            self._read_response(tx, response)

        call = yield from self._transaction(origin, episode, work, operation=operation)
        return call.observation

    def _read_response(self, tx: Ledger, r: _Response) -> None:
        body: Mapping[str, Any] = r.body if isinstance(r.body, Mapping) else {}
        tx.stats.responses += 1
        if r.response_bytes is not None:
            tx.stats.response_bytes += r.response_bytes
            if r.response_bytes > self.limits.max_body_bytes:
                refuse(
                    tx,
                    "max_body_bytes",
                    f"a {r.response_bytes}-byte body; its contract was not read",
                    cap=self.limits.max_body_bytes,
                    actual=r.response_bytes,
                )
                return
        tx.stats.contract_bytes += (
            r.contract_bytes if r.contract_bytes is not None else measure_contract_bytes(body)
        )
        if not self.strategy.stores:
            return
        contract = read_contract(tx, body)
        failure = r.status == 422
        suggestions = read_suggestions(tx, body, self.limits) if failure else []
        if contract is not None or suggestions:
            doubt = self.trust.doubt(body, r.signature, since=r.delta_since, now=tx.now)
            if doubt is not None:
                self._invalidation.distrust(tx, doubt, suggestions)
                contract, suggestions = None, []
        if contract is not None:
            tx.seq = contract.contract_seq
        invalidates = self.strategy.invalidates
        if invalidates and contract is not None and self.detection.reads_stamps(r.status):
            self._invalidation.read_stamps(tx, contract, r.delta_since)
        if suggestions and invalidates:
            self._invalidation.on_failure(tx, suggestions)
        injected = self._admission.injected(tx, r.injected)
        lesson = Lesson(
            tuple(suggestions),
            contract,
            injected,
            r.response_id or instance_of(body),
            self._admission.contradicted(tx, suggestions, injected, r.request),
            tx.operation,
            dict(r.request) if r.request is not None else None,
        )
        if suggestions and self._invalidation.needs(tx):
            # Invalidate first, then learn: storing now would supersede the very entries the
            # pending diff is about to judge, hiding a stale entry as a mere replacement.
            tx.lessons.append(lesson)
        else:
            self._settle(tx)
            self._admission.learn(tx, lesson)

    def _apply_changes(
        self,
        origin: str,
        feed: ChangesFeed | Mapping[str, Any],
        episode: int | None,
        signature: str | None,
    ) -> Steps[Observation]:
        raw = feed.to_wire() if isinstance(feed, ChangesFeed) else feed
        items = feed_items(raw)
        if items > self.limits.max_feed_items:
            return (
                yield from self._lost_feed(
                    origin, episode, "max_feed_items", items, self.limits.max_feed_items
                )
            )
        parsed = feed if isinstance(feed, ChangesFeed) else ChangesFeed.model_validate(feed)
        return (yield from self._feed(origin, raw, parsed, episode, signature))

    def _feed(
        self,
        origin: str,
        raw: Mapping[str, Any],
        feed: ChangesFeed,
        episode: int | None,
        signature: str | None,
    ) -> Steps[Observation]:
        def work(tx: Ledger) -> None:
            if not self.strategy.invalidates:
                return
            doubt = self.trust.doubt(raw, signature, since=None, now=tx.now)
            if doubt is not None:
                self._invalidation.distrust(tx, doubt)
            else:
                self._invalidation.apply_feed(tx, feed)

        call = yield from self._transaction(origin, episode, work)
        return call.observation

    def _lost_feed(
        self, origin: str, episode: int | None, bound: str, actual: int, cap: int
    ) -> Steps[Observation]:
        """A changes feed over a bound: refused unread, and the history it held is lost."""

        def work(tx: Ledger) -> None:
            refuse(tx, bound, "a changes feed over the cap was not read", cap=cap, actual=actual)
            if not self.strategy.invalidates:
                return
            if self.trust.require_signatures:
                self._invalidation.distrust(tx, "the feed was too large to verify")
            else:
                self._invalidation.resync(tx, f"the changes feed was over {bound}={cap}")

        call = yield from self._transaction(origin, episode, work)
        return call.observation

    def _apply_rules(
        self,
        origin: str,
        listing: RulesListing | Mapping[str, Any],
        episode: int | None,
        signature: str | None,
    ) -> Steps[Observation]:
        raw = listing.to_wire() if isinstance(listing, RulesListing) else listing
        parsed = (
            listing if isinstance(listing, RulesListing) else RulesListing.model_validate(listing)
        )
        return (yield from self._rules(origin, raw, parsed, episode, signature))

    def _rules(
        self,
        origin: str,
        raw: Mapping[str, Any],
        listing: RulesListing,
        episode: int | None,
        signature: str | None,
    ) -> Steps[Observation]:
        def work(tx: Ledger) -> None:
            if not self.strategy.invalidates:
                return
            doubt = self.trust.doubt(raw, signature, since=None, now=tx.now)
            if doubt is not None:
                self._invalidation.distrust(tx, doubt)
            else:
                self._invalidation.apply_rules(tx, listing)

        call = yield from self._transaction(origin, episode, work)
        return call.observation

    def _resync_required(
        self,
        origin: str,
        episode: int | None,
        problem: Mapping[str, Any] | None,
        signature: str | None,
    ) -> Steps[Observation]:
        def work(tx: Ledger) -> None:
            if not self.strategy.invalidates:
                return
            doubt = self.trust.doubt(problem or {}, signature, since=None, now=tx.now)
            if doubt is not None:
                self._invalidation.distrust(tx, doubt)
            else:
                detail = "the server's change log no longer covers the memory's position"
                self._invalidation.resync(tx, detail)

        call = yield from self._transaction(origin, episode, work)
        return call.observation

    def _answer(
        self,
        need: Need,
        status: int,
        body: Any,
        episode: int | None,
        signature: str | None,
        body_bytes: int | None,
    ) -> Steps[Observation]:
        cap = self.limits.max_feed_bytes
        if body_bytes is not None and body_bytes > cap:
            if isinstance(need, FetchChanges):
                return (
                    yield from self._lost_feed(
                        need.origin, episode, "max_feed_bytes", body_bytes, cap
                    )
                )

            def over(tx: Ledger) -> None:
                refuse(tx, "max_feed_bytes", "a rule listing over the cap was not read", cap=cap)
                self._invalidation.strategy.on_rules_unavailable(tx)

            call = yield from self._transaction(need.origin, episode, over)
            return call.observation
        if status == 410:
            problem = body if isinstance(body, Mapping) else None
            return (yield from self._resync_required(need.origin, episode, problem, signature))
        if status == 200 and isinstance(body, Mapping):
            if isinstance(need, FetchChanges):
                items = feed_items(body)
                if items > self.limits.max_feed_items:
                    return (
                        yield from self._lost_feed(
                            need.origin,
                            episode,
                            "max_feed_items",
                            items,
                            self.limits.max_feed_items,
                        )
                    )
                feed = _parsed(ChangesFeed, body)
                if feed is not None:
                    return (yield from self._feed(need.origin, body, feed, episode, signature))
            else:
                listing = _parsed(RulesListing, body)
                if listing is not None:
                    return (yield from self._rules(need.origin, body, listing, episode, signature))
        return (yield from self._need_failed(need, episode))

    def _need_failed(self, need: Need, episode: int | None) -> Steps[Observation]:
        def work(tx: Ledger) -> None:
            if isinstance(need, FetchChanges):
                self._invalidation.feed_unavailable(tx)
            else:
                self.strategy.on_rules_unavailable(tx)

        call = yield from self._transaction(need.origin, episode, work)
        return call.observation

    def _fetch_failed(self, need: Need, detail: str, episode: int | None) -> Steps[Observation]:
        def work(tx: Ledger) -> None:
            tx.emit(
                FetchFailed(
                    origin=tx.origin,
                    episode=tx.episode,
                    path=need.path,
                    detail=detail,
                    withheld=self._invalidation.withheld(tx, need),
                )
            )

        call = yield from self._transaction(need.origin, episode, work)
        return call.observation

    def _apply_patches(
        self,
        origin: str,
        request: Mapping[str, Any],
        entries: Sequence[MemoryEntry],
        episode: int | None,
        operation: str | None,
    ) -> Steps[PatchOutcome]:
        for entry in entries:
            if entry.origin != origin:
                raise ValueError(f"entry {entry.id} is of {entry.origin}, not {origin}")

        def work(tx: Ledger) -> PatchOutcome:
            patchable = tx.state.patchable
            if patchable is None:
                raise ValueError(
                    f"{origin} has published no patchable paths; call set_patchable first"
                )
            current = copy.deepcopy(dict(request))
            applied: list[str] = []
            skipped: list[tuple[str, str]] = []
            for entry in entries:
                why = _not_applicable(tx, entry, operation)
                if why is not None:
                    skipped.append((entry.id, why))
                    continue
                try:
                    result = apply_patch(current, _scoped_patch(entry), patchable)
                except PatchRefused as exc:
                    tx.quarantine(entry.id, str(exc))
                    continue
                if result.applied:
                    current = result.request
                    applied.append(entry.id)
                else:
                    skipped.append((entry.id, result.reason or "does not apply"))
            return PatchOutcome(current, tuple(applied), tuple(skipped), ())

        call = yield from self._transaction(origin, episode, work)
        outcome = call.result
        return PatchOutcome(
            outcome.request, outcome.applied, outcome.skipped, tuple(call.tx.events)
        )

    def _flush(self, origin: str) -> Steps[_Call[None]]:
        def work(tx: Ledger) -> None:
            tx.flush = True

        return (yield from self._transaction(origin, None, work))

    def _fresh(self, origin: str) -> Steps[Replica]:
        if not origin:
            raise ValueError("origin must be a non-empty string")
        return (yield from self._replicas.fresh(origin))

    # ------------------------------------------------------------------ one call, end to end

    def _transaction(
        self,
        origin: str,
        episode: int | None,
        work: Callable[[Ledger], T],
        *,
        operation: str | None = None,
    ) -> Steps[_Call[T]]:
        """Compute ``work`` on a current replica and commit it; recompute if another writer won."""
        for _ in range(MAX_CONFLICTS):
            replica = yield from self._fresh(origin)
            with self._lock:
                base = replica.generation
                call = self._compute(replica, origin, episode, operation or "", work)
                tx = call.tx
                if not (tx.written or tx.removed or tx.flush or tx.state != replica.state):
                    replica.unflushed.add(tx.stats)
                    self._lessons[origin] = tx.lessons
                    _log(tx.events)
                    return call
                flushed = replica.unflushed.copy()
                total = replica.stats.plus(flushed).plus(tx.stats)
                ops = commit_ops(tx, base, total)
            try:
                yield ops
            except StoreConflict:
                self._replicas.suspect(origin)
                continue
            self._replicas.committed(replica, tx, base, total, flushed)
            with self._lock:
                self._lessons[origin] = tx.lessons
            _log(tx.events)
            return call
        raise StoreError(f"{origin}: gave up after {MAX_CONFLICTS} writes lost to other writers")

    def _compute(
        self,
        replica: Replica,
        origin: str,
        episode: int | None,
        operation: str,
        work: Callable[[Ledger], T],
    ) -> _Call[T]:
        tx = Ledger(
            origin,
            IndexOverlay(replica.index),
            replica.state.copy(),
            episode=episode if episode is not None else self._episodes.get(origin),
            now=self._clock(),
            cascade=self.strategy.cascades,
            operation=operation,
        )
        tx.lessons = list(self._lessons.get(origin, ()))
        result = work(tx)
        self._settle(tx)
        return _Call(tx, result, tuple(self._invalidation.needs(tx)))

    def _settle(self, tx: Ledger) -> None:
        """Once nothing is outstanding, learn the fixes held back for it."""
        if tx.lessons and not self._invalidation.needs(tx):
            held, tx.lessons = tx.lessons, []
            for lesson in held:
                self._admission.learn(tx, lesson)

    def _unflushed(self) -> list[str]:
        return [origin for origin, replica in self._replicas.items() if replica.unflushed]

    def _headers(self, replica: Replica) -> dict[str, str]:
        with self._lock:
            since, epoch = replica.state.known_seq, replica.state.epoch
        if since is None:
            return {}
        return {"Contract-Since": str(since), **({"Contract-Epoch": epoch} if epoch else {})}

    def _sync(self, steps: Steps[T]) -> T:
        """Run steps against the store, synchronously."""
        try:
            ops = next(steps)
            while True:
                try:
                    results: list[Result] = self.store.batch(ops)
                except StoreError as exc:
                    ops = steps.throw(exc)
                else:
                    ops = steps.send(results)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _async(self, steps: Steps[T]) -> T:
        """Run steps against the store without blocking the event loop (``Store.abatch``)."""
        try:
            ops = next(steps)
            while True:
                try:
                    results: list[Result] = await self.store.abatch(ops)
                except StoreError as exc:
                    ops = steps.throw(exc)
                else:
                    ops = steps.send(results)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class _Response:
    """What ``observe`` was given about one response."""

    request: Mapping[str, Any] | None
    status: int
    body: Mapping[str, Any] | None
    injected: tuple[str, ...]
    delta_since: int | None
    response_bytes: int | None
    contract_bytes: int | None
    response_id: str | None
    signature: str | None


def _nothing(tx: Ledger) -> None:
    """A call that only reads: the needs still outstanding."""


M = TypeVar("M", ChangesFeed, RulesListing)


def _parsed(model: type[M], body: Mapping[str, Any]) -> M | None:
    """``body`` as a ``model``, or None when it is not one (the need then failed)."""
    try:
        return model.model_validate(body)
    except ValidationError:
        return None


def _not_applicable(tx: Ledger, entry: MemoryEntry, operation: str | None) -> str | None:
    if entry.id not in tx.index:
        return "no longer live"
    if operation is not None and entry.operation != operation:
        return f"learned on operation {entry.operation!r}, not {operation!r}"
    if not entry.suggestion.patch:
        return "no patch; left to the planner"
    return None


def _scoped_patch(entry: MemoryEntry) -> list[PatchOperation]:
    """The entry's patch, preceded by a ``test`` of each scope field: it applies only in scope."""
    tests = [
        PatchOperation(op="test", path=field_pointer(name), value=value)
        for name, value in entry.key.scope_items
    ]
    return tests + list(entry.suggestion.patch or ())


def _log(events: Sequence[MemoryEvent]) -> None:
    """A log record for every bound violated and every fetch that failed."""
    for event in events:
        if isinstance(event, Refused):
            logger.warning(
                "%s: refused (%s): %s%s",
                event.origin,
                event.bound,
                event.detail,
                f" [{event.suggestion_type}]" if event.suggestion_type else "",
            )
        elif isinstance(event, FetchFailed):
            logger.warning(
                "%s: could not fetch %s (%s); %d entries withheld until it is",
                event.origin,
                event.path,
                event.detail,
                len(event.withheld),
            )
