"""The cross-episode fix memory: a sans-IO core that learns fixes and keeps them honest.

``FixMemory`` never performs network I/O. It is driven with what an HTTP client saw
(``observe``), asked what to inject (``lookup``/``relevant``), and answers every call with an
``Observation``: typed events (stored, served, evicted, restamped, quarantined, ...) and needs
(``FetchChanges``, ``FetchRules``) that an adapter — the httpx transport, or the evaluation
harness — fulfils and feeds back (``apply_changes``, ``apply_rules``, ``resync_required``,
``need_failed``). Each call's changes are written to the store as one atomic batch.

Every origin is separate: a response from one origin never evicts or restamps another's entries.
The memory keeps a live index of each origin it has touched (loaded from the store on first use),
so one process should own a store at a time; an operator's ``memory evict`` on a store in use
is seen by that process after it restarts.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from typing import Any, Self

from pydantic import ValidationError

from ..protocol.canonical import canonical_json
from ..protocol.models import CacheHint, ChangesFeed, ContractFields, RulesListing, Suggestion
from ..protocol.wirecost import ENVELOPE_FIELDS
from .detection import Detection
from .entries import (
    EvictionReason,
    MemoryEntry,
    MemoryKey,
    Provenance,
    Tombstone,
    dependencies_of,
    later,
    rule_vector,
)
from .events import (
    Evicted,
    FetchChanges,
    FetchRules,
    Ignored,
    MemoryEvent,
    Need,
    NotStored,
    Observation,
    Served,
)
from .index import OriginIndex
from .layout import commit_ops, has_tombstone, load_origin, load_tombstones, stored_origins
from .ledger import Ledger
from .patching import PatchRefused, apply_patch, as_pointer
from .state import OriginState
from .stats import OriginStats
from .stats import contract_bytes as measure_contract_bytes
from .stores import InMemoryStore, SQLiteStore, Store
from .strategies import Strategy, evict_changed_rows, resolve_held, restamp_unchanged, strategy_for
from .trust import TrustPolicy


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
class _Deferred:
    """Fixes from a failure response held back until the stale entries it revealed are settled."""

    suggestions: tuple[Suggestion, ...]
    contract: ContractFields | None
    derived_from: tuple[str, ...]
    response_id: str | None
    contradicted: tuple[str, ...] = ()


@dataclass(slots=True)
class _Origin:
    index: OriginIndex
    state: OriginState
    stats: OriginStats
    deferred: list[_Deferred] = field(default_factory=list)


class FixMemory:
    """A fix memory with one invalidation strategy and one detection policy over one store.

    ``strategy``: a name (``"row"``), an arm code (``"A2D"``) or a ``Strategy``.
    ``detection``: ``"eager"`` (default), ``"lazy"`` or ``"resync"``.
    ``store``: a ``Store``; a path opens an ``SQLiteStore`` there; ``None`` keeps it in memory.
    ``close_store``: whether ``close()`` closes the store (default: when the memory opened it).
    ``trust``: the defences against a dishonest server (``TrustPolicy``); default: none.
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
    ) -> None:
        self.strategy = strategy_for(strategy)
        self.trust = trust if trust is not None else TrustPolicy()
        self.detection = Detection.parse(detection)
        self._owns_store = not isinstance(store, Store) if close_store is None else close_store
        if store is None:
            store = InMemoryStore()
        elif not isinstance(store, Store):
            store = SQLiteStore(store)
        self.store: Store = store
        self._clock = clock
        self._lock = threading.RLock()
        self._origins: dict[str, _Origin] = {}

    # ------------------------------------------------------------------ driving the memory

    def begin_episode(self, origin: str, episode: int) -> list[Need]:
        """Mark the start of an episode; returns what must be fetched before memory is used.

        Under ``resync`` detection this asks for the changes feed since the last position; under
        any detection it repeats needs still outstanding.
        """
        with self._lock:
            tx = self._begin(origin, episode)
            tx.state.episode = episode
            needs = list(self._commit(tx).needs)
            st = tx.state
            if (
                self.detection.resyncs_before_episode
                and self.strategy.invalidates
                and len(tx.index)
                and not any(isinstance(need, FetchChanges) for need in needs)
            ):
                needs.insert(0, FetchChanges(origin, st.synced_seq or 0, st.epoch))
            return needs

    def lookup(
        self, origin: str, draft: Mapping[str, Any], *, episode: int | None = None
    ) -> Lookup:
        """The entries relevant to a draft (every scope field equal), counted as a hit or a miss.

        Expired entries (``max_age_s``) are evicted; entries awaiting a diff are withheld.
        """
        with self._lock:
            tx = self._begin(origin, episode)
            tx.stats.lookups += 1
            served: list[MemoryEntry] = []
            if self.strategy.stores:
                for entry in tx.index.matching(draft):
                    if self.trust.guard_parameters:
                        refused = self.trust.injection(entry.suggestion, tx.state.patchable)
                        if refused is not None:
                            tx.quarantine(entry.id, refused)
                            continue
                    if self.strategy.invalidates:
                        expiry = self.trust.expiry(entry, tx.now)
                        if expiry is not None:
                            tx.evict(entry.id, EvictionReason.MAX_AGE, expiry)
                            continue
                        if self.strategy.withholds(tx.state, entry):
                            continue
                    served.append(entry)
                    tx.emit(
                        Served(origin=origin, episode=tx.episode, entry_id=entry.id, key=entry.key)
                    )
            if served:
                tx.stats.hits += 1
            else:
                tx.stats.misses += 1
            obs = self._commit(tx)
            return Lookup(tuple(served), obs.events)

    def relevant(
        self, origin: str, draft: Mapping[str, Any], *, episode: int | None = None
    ) -> list[MemoryEntry]:
        """``lookup(...).entries`` as a list: the entries to inject into this draft."""
        return list(self.lookup(origin, draft, episode=episode).entries)

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
    ) -> Observation:
        """Feed one response from ``origin`` to the memory.

        ``injected``: ids of the entries put into this request (new fixes record them as
        ``derived_from``). ``delta_since``: the ``Contract-Since`` the server echoed, when it did —
        then ``table_versions`` lists only tables changed after it. ``signature``: the response's
        ``Contract-Signature``, checked against ``body`` as received when the trust policy has
        keys. ``contract_bytes``: the body's contract bytes when the caller measured them already
        (``protocol.wirecost``); else the memory measures them. ``request`` is kept for symmetry
        with the wire and is not stored.
        """
        del request
        with self._lock:
            tx = self._begin(origin, episode)
            body = body if isinstance(body, Mapping) else {}
            tx.stats.responses += 1
            tx.stats.contract_bytes += (
                contract_bytes if contract_bytes is not None else measure_contract_bytes(body)
            )
            if response_bytes is not None:
                tx.stats.response_bytes += response_bytes
            if not self.strategy.stores:
                return self._commit(tx)
            contract = self._contract(tx, body)
            failure = status == 422
            suggestions = self._suggestions(tx, body) if failure else []
            if contract is not None or suggestions:
                doubt = self.trust.doubt(body, signature, since=delta_since, now=tx.now)
                if doubt is not None:
                    self._distrust(tx, doubt, suggestions)
                    contract, suggestions = None, []
            if contract is not None:
                tx.seq = contract.contract_seq
            if (
                self.strategy.invalidates
                and contract is not None
                and self.detection.reads_stamps(status)
            ):
                self._read_stamps(tx, contract, delta_since)
            if suggestions and self.strategy.invalidates:
                self.strategy.on_failure(tx, suggestions)
            injected_ids = self._injected(tx, injected)
            rid = response_id or _instance(body)
            contradicted = self._contradicted(tx, suggestions, injected_ids)
            if suggestions and self._needs(tx):
                # Invalidate first, then learn: storing now would supersede the very entries the
                # pending diff is about to judge, hiding a stale entry as a mere replacement.
                self._origins[origin].deferred.append(
                    _Deferred(tuple(suggestions), contract, injected_ids, rid, contradicted)
                )
            else:
                self._learn(
                    tx, _Deferred(tuple(suggestions), contract, injected_ids, rid, contradicted)
                )
            return self._commit(tx)

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
        """
        raw = feed.to_wire() if isinstance(feed, ChangesFeed) else feed
        feed = feed if isinstance(feed, ChangesFeed) else ChangesFeed.model_validate(feed)
        with self._lock:
            tx = self._begin(origin, episode)
            if not self.strategy.invalidates:
                return self._settle(tx)
            doubt = self.trust.doubt(raw, signature, since=None, now=tx.now)
            if doubt is not None:
                self._distrust(tx, doubt)
                return self._commit(tx)
            st = tx.state
            if st.epoch is not None and feed.contract_epoch != st.epoch:
                self._resync(
                    tx, f"changes feed is of epoch {feed.contract_epoch}, memory of {st.epoch}"
                )
                st.epoch = feed.contract_epoch
                return self._settle(tx)
            st.epoch = feed.contract_epoch
            new_rules = self._merge_feed(tx, feed)
            if st.revalidating:
                held = set(st.revalidating)
                self.strategy.on_changes(tx, _feed_of(feed, held, keep=False))
                revalidated = _feed_of(feed, held, keep=True)
                evict_changed_rows(tx, revalidated)
                restamp_unchanged(tx, revalidated)
                resolve_held(tx, st.revalidating, feed.last_seq)
            else:
                self.strategy.on_changes(tx, feed)
            if new_rules is not None:
                self._rules_stamp(tx, new_rules)
            st.synced_seq = later(st.synced_seq, feed.last_seq)
            return self._settle(tx)

    def apply_rules(
        self,
        origin: str,
        listing: RulesListing | Mapping[str, Any],
        *,
        episode: int | None = None,
        signature: str | None = None,
    ) -> Observation:
        """Feed a ``GET /contract/rules`` answer (a ``FetchRules`` need fulfilled)."""
        raw = listing.to_wire() if isinstance(listing, RulesListing) else listing
        listing = (
            listing if isinstance(listing, RulesListing) else RulesListing.model_validate(listing)
        )
        with self._lock:
            tx = self._begin(origin, episode)
            doubt = self.trust.doubt(raw, signature, since=None, now=tx.now)
            if doubt is not None and self.strategy.invalidates:
                self._distrust(tx, doubt)
                return self._commit(tx)
            if self.strategy.invalidates:
                old = tx.state.rules_version
                tx.state.rules_version = listing.rules_version
                if self.strategy.reads_rules:
                    if old is not None and old != listing.rules_version:
                        tx.rules_alert(old, listing.rules_version)
                    self.strategy.on_rules_listing(tx, listing)
            return self._settle(tx)

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
        with self._lock:
            tx = self._begin(origin, episode)
            doubt = self.trust.doubt(problem or {}, signature, since=None, now=tx.now)
            if doubt is not None and self.strategy.invalidates:
                self._distrust(tx, doubt)
                return self._commit(tx)
            if self.strategy.invalidates:
                self._resync(tx, "the server's change log no longer covers the memory's position")
            return self._settle(tx)

    def answer(
        self,
        need: Need,
        status: int,
        body: Any,
        *,
        episode: int | None = None,
        signature: str | None = None,
    ) -> Observation:
        """Feed the HTTP answer to a need, whatever it was: the one call an adapter makes.

        410 → ``resync_required``; 200 with a valid body → ``apply_changes`` / ``apply_rules``;
        anything else (another status, a body that does not parse) → ``need_failed``.
        """
        if status == 410:
            problem = body if isinstance(body, Mapping) else None
            return self.resync_required(
                need.origin, episode=episode, problem=problem, signature=signature
            )
        if status == 200 and isinstance(body, Mapping):
            apply = self.apply_changes if isinstance(need, FetchChanges) else self.apply_rules
            try:
                return apply(need.origin, body, episode=episode, signature=signature)
            except ValidationError:
                pass
        return self.need_failed(need, episode=episode)

    def need_failed(self, need: Need, *, episode: int | None = None) -> Observation:
        """A need could not be fulfilled (not served, or not understood): fall back conservatively.

        No changes feed: entries on moved tables are evicted at table granularity. No rule
        listing: rule-dependent entries under the old stamp are evicted. (A transient network
        error is not a failure: leave the need outstanding and it is asked again.)
        """
        with self._lock:
            tx = self._begin(need.origin, episode)
            if isinstance(need, FetchChanges):
                self.strategy.on_changes_unavailable(tx)
                self._revalidation_unavailable(tx)
            else:
                self.strategy.on_rules_unavailable(tx)
            return self._settle(tx)

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
        with self._lock:
            tx = self._begin(origin, episode)
            if everything:
                targets = [entry.id for entry in tx.index]
            elif table is not None:
                targets = [entry.id for entry in tx.index.on_table(table)]
            else:
                targets = list(dict.fromkeys(entry_ids))
            for entry_id in targets:
                tx.evict(entry_id, reason, detail)
            return self._commit(tx)

    # ------------------------------------------------------------------ client apply mode

    def set_patchable(self, origin: str, paths: Iterable[str]) -> None:
        """Record the request paths ``origin`` lets the client patch.

        Each is a JSON Pointer (``/metadata/note``) or a top-level field name (``promo_code``).
        """
        checked = sorted({as_pointer(path) for path in paths})
        with self._lock:
            tx = self._begin(origin, None)
            tx.state.patchable = checked
            self._commit(tx)

    def apply_patches(
        self,
        origin: str,
        request: Mapping[str, Any],
        entries: Sequence[MemoryEntry],
        *,
        episode: int | None = None,
    ) -> PatchOutcome:
        """Apply each entry's cached patch, in order, to a copy of the planned request.

        A patch that writes outside the origin's patchable paths is refused and its entry
        quarantined. Raises ``ValueError`` if the origin has no published patchable paths.
        """
        with self._lock:
            tx = self._begin(origin, episode)
            patchable = tx.state.patchable
            if patchable is None:
                raise ValueError(
                    f"{origin} has published no patchable paths; call set_patchable first"
                )
            current = copy.deepcopy(dict(request))
            applied: list[str] = []
            skipped: list[tuple[str, str]] = []
            for entry in entries:
                if entry.origin != origin:
                    raise ValueError(f"entry {entry.id} is of {entry.origin}, not {origin}")
                if not entry.suggestion.patch:
                    skipped.append((entry.id, "no patch; left to the planner"))
                    continue
                try:
                    result = apply_patch(current, entry.suggestion.patch, patchable)
                except PatchRefused as exc:
                    tx.quarantine(entry.id, str(exc))
                    continue
                if result.applied:
                    current = result.request
                    applied.append(entry.id)
                else:
                    skipped.append((entry.id, result.reason or "does not apply"))
            obs = self._commit(tx)
            return PatchOutcome(current, tuple(applied), tuple(skipped), obs.events)

    # ------------------------------------------------------------------ reading the memory

    def entries(self, origin: str) -> list[MemoryEntry]:
        """The origin's live entries, in the order they were stored."""
        with self._lock:
            return list(self._view(origin).index)

    def tombstones(self, origin: str) -> list[Tombstone]:
        """The origin's evicted entries, in the order they were evicted."""
        with self._lock:
            return load_tombstones(self.store, origin)

    def stats(self, origin: str) -> OriginStats:
        """A copy of the origin's counters."""
        with self._lock:
            return self._view(origin).stats.copy()

    def state(self, origin: str) -> OriginState:
        """A copy of what the memory knows of the origin's contract."""
        with self._lock:
            return OriginState.from_dict(self._view(origin).state.to_dict())

    def origins(self) -> list[str]:
        """Every origin the store holds a memory of."""
        with self._lock:
            return stored_origins(self.store)

    def contract_since(self, origin: str) -> int | None:
        """The ``Contract-Since`` to send: the seq the memory's known versions are accurate at."""
        if not self.strategy.invalidates:
            return None
        with self._lock:
            return self._view(origin).state.known_seq

    def conditional_headers(self, origin: str) -> dict[str, str]:
        """The request headers of the conditional contract: ``Contract-Since`` and ``Contract-Epoch``.

        Empty until the memory knows a position; the server then answers only what moved after it.
        """
        since = self.contract_since(origin)
        if since is None:
            return {}
        with self._lock:
            epoch = self._view(origin).state.epoch
        return {"Contract-Since": str(since), **({"Contract-Epoch": epoch} if epoch else {})}

    def close(self) -> None:
        """Close the store if this memory opened it."""
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _view(self, origin: str) -> _Origin:
        view = self._origins.get(origin)
        if view is None:
            view = self._load(origin)
            self._origins[origin] = view
        return view

    def _load(self, origin: str) -> _Origin:
        return _Origin(*load_origin(self.store, origin))

    def _begin(self, origin: str, episode: int | None) -> Ledger:
        if not origin:
            raise ValueError("origin must be a non-empty string")
        view = self._view(origin)
        return Ledger(
            origin,
            view.index,
            view.state,
            view.stats,
            episode=episode if episode is not None else view.state.episode,
            now=self._clock(),
            cascade=self.strategy.cascades,
        )

    def _commit(self, tx: Ledger) -> Observation:
        try:
            self.store.batch(commit_ops(tx))
        except BaseException:
            self._origins.pop(tx.origin, None)  # the index ran ahead of the store: reload it
            raise
        return Observation(tuple(tx.events), tuple(self._needs(tx)))

    def _settle(self, tx: Ledger) -> Observation:
        """Commit a fulfilment; once nothing is outstanding, store the fixes held back for it."""
        view = self._origins[tx.origin]
        if view.deferred and not self._needs(tx):
            held, view.deferred = view.deferred, []
            for item in held:
                self._learn(tx, item)
        return self._commit(tx)

    def _learn(self, tx: Ledger, item: _Deferred) -> None:
        """Retire the injected fixes a failure contradicted (if still live), then store its fixes."""
        for entry_id in item.contradicted:
            tx.evict(
                entry_id, EvictionReason.CONTRADICTED, "the server rejected a request carrying it"
            )
        for suggestion in item.suggestions:
            self._store(tx, suggestion, item.contract, item.derived_from, item.response_id)

    def _contradicted(
        self, tx: Ledger, suggestions: Sequence[Suggestion], injected: Sequence[str]
    ) -> tuple[str, ...]:
        """Injected entries whose fix sets a field that a suggestion of this failure sets otherwise.

        This is the failure-gated channel every invalidating strategy has: the server just said
        the value the cached fix supplied is wrong for this request.
        """
        if not (suggestions and self.strategy.invalidates):
            return ()
        out = []
        for entry_id in injected:
            entry = tx.index.entries.get(entry_id)
            if entry is None:
                continue
            mine = entry.suggestion.parameters
            if any(
                name in mine and canonical_json(mine[name]) != canonical_json(value)
                for s in suggestions
                for name, value in s.parameters.items()
            ):
                out.append(entry_id)
        return tuple(out)

    def _needs(self, tx: Ledger) -> list[Need]:
        needs: list[Need] = []
        if self.strategy.wants_changes(tx) or tx.state.revalidating:
            needs.append(FetchChanges(tx.origin, tx.state.synced_seq or 0, tx.state.epoch))
        if self.strategy.wants_rules(tx):
            needs.append(FetchRules(tx.origin))
        return needs

    def _contract(self, tx: Ledger, body: Mapping[str, Any]) -> ContractFields | None:
        fields = {name: body[name] for name in ENVELOPE_FIELDS if body.get(name) is not None}
        if not fields:
            return None
        try:
            return ContractFields.model_validate(fields)
        except ValidationError as exc:
            tx.emit(
                Ignored(
                    origin=tx.origin,
                    episode=tx.episode,
                    detail=f"malformed contract fields: {_first(exc)}",
                )
            )
            return None

    def _suggestions(self, tx: Ledger, body: Mapping[str, Any]) -> list[Suggestion]:
        feedback = body.get("recovery_feedback")
        raw = feedback.get("suggestions") if isinstance(feedback, Mapping) else None
        out = []
        for item in raw if isinstance(raw, list) else ():
            try:
                out.append(Suggestion.model_validate(item))
            except ValidationError as exc:
                kind = item.get("type") if isinstance(item, Mapping) else None
                tx.emit(
                    NotStored(
                        origin=tx.origin,
                        episode=tx.episode,
                        suggestion_type=kind if isinstance(kind, str) else None,
                        reason=f"malformed suggestion: {_first(exc)}",
                    )
                )
        return out

    def _read_stamps(self, tx: Ledger, contract: ContractFields, delta_since: int | None) -> None:
        st = tx.state
        if contract.contract_epoch is not None:
            if st.epoch is not None and contract.contract_epoch != st.epoch:
                self._resync(
                    tx, f"contract_epoch moved from {st.epoch} to {contract.contract_epoch}"
                )
            st.epoch = contract.contract_epoch
        seq = contract.contract_seq
        if seq is not None and st.known_seq is not None and seq < st.known_seq:
            return  # an older response than the memory's position: nothing new in it
        trusted = False
        versions = contract.table_versions
        if versions is None and delta_since is not None:
            versions = {}  # a conditional answer leaves out an empty delta
            contract = contract.model_copy(update={"table_versions": versions})
        if contract.table_versions is not None:
            full = delta_since is None
            trusted = full or (st.known_seq is not None and delta_since <= st.known_seq)
            moves: dict[str, tuple[str, str | None]] = {}
            for table in sorted(contract.table_versions):
                version = contract.table_versions[table]
                old = st.known.get(table)
                if old == version:
                    continue
                st.known[table] = version
                if old is not None:
                    moves[table] = (old, version)
                elif any(e.dependency(table).version != version for e in tx.index.on_table(table)):  # type: ignore[union-attr]
                    moves[table] = ("", version)
            if full:
                for table in sorted(set(st.known) - set(contract.table_versions)):
                    moves[table] = (st.known.pop(table), None)
            for table, (old, new) in moves.items():
                if old:
                    tx.version_moved(table, old, new)
            if moves:
                self._on_moves(tx, moves)
        if contract.rules_version is not None:
            self._rules_stamp(tx, contract.rules_version)
        if seq is not None and trusted:
            st.known_seq = later(st.known_seq, seq)
            if not st.pending and not st.graph_pending and not st.revalidating:
                st.synced_seq = later(st.synced_seq, seq)

    def _rules_stamp(self, tx: Ledger, new: str) -> None:
        old = tx.state.rules_version
        tx.state.rules_version = new
        if old is not None and old != new and self.strategy.reads_rules:
            tx.rules_alert(old, new)
            self.strategy.on_rules_moved(tx, old, new)

    def _merge_feed(self, tx: Ledger, feed: ChangesFeed) -> str | None:
        """Bring the known versions to ``feed.last_seq``; return the rules version if it moved."""
        st = tx.state
        base = st.known_seq
        for tr in sorted(feed.tables, key=lambda t: t.seq):
            if base is not None and tr.seq <= base:
                continue
            old = st.known.get(tr.table)
            if old != tr.new_version:
                if old is not None:
                    tx.version_moved(tr.table, old, tr.new_version)
                st.known[tr.table] = tr.new_version
        rules = [
            rc for rc in sorted(feed.rules, key=lambda r: r.seq) if base is None or rc.seq > base
        ]
        st.known_seq = later(base, feed.last_seq)
        return rules[-1].new_rules_version if rules else None

    def _resync(self, tx: Ledger, detail: str) -> None:
        for entry in list(tx.index):
            tx.evict(entry.id, EvictionReason.RESYNC, detail)
        tx.state.reset_contract()

    def _injected(self, tx: Ledger, injected: Iterable[str]) -> tuple[str, ...]:
        """The injected ids that are entries of this origin (live, or evicted and on record)."""
        return tuple(
            entry_id
            for entry_id in dict.fromkeys(injected)
            if entry_id in tx.index
            or entry_id in tx.removed
            or has_tombstone(self.store, tx.origin, entry_id)
        )

    def _store(
        self,
        tx: Ledger,
        suggestion: Suggestion,
        contract: ContractFields | None,
        derived_from: tuple[str, ...],
        response_id: str | None,
    ) -> None:
        if suggestion.cache_hint is not CacheHint.CACHEABLE:
            hint = suggestion.cache_hint.value if suggestion.cache_hint else "absent"
            tx.emit(
                NotStored(
                    origin=tx.origin,
                    episode=tx.episode,
                    suggestion_type=suggestion.type,
                    reason=f"cache_hint is {hint}",
                )
            )
            return
        if self.trust.guard_parameters:
            refused = self.trust.injection(suggestion, tx.state.patchable)
            if refused is not None:
                tx.emit(
                    NotStored(
                        origin=tx.origin,
                        episode=tx.episode,
                        suggestion_type=suggestion.type,
                        reason=f"refused: {refused}",
                    )
                )
                return
        st = tx.state
        stamped = (contract.table_versions if contract else None) or {}
        deps = dependencies_of(
            suggestion, lambda table: stamped.get(table) or st.known.get(table, "")
        )
        key = MemoryKey.of(tx.origin, suggestion.type, suggestion.scope)
        old = tx.index.by_key(key)
        if old is not None and not self.strategy.replaces:
            tx.emit(
                NotStored(
                    origin=tx.origin,
                    episode=tx.episode,
                    suggestion_type=suggestion.type,
                    reason=f"{self.strategy.name} memory keeps its entry {old.id} for this key",
                )
            )
            return
        serial = st.next_serial
        st.next_serial += 1
        entry_id = f"e{serial}"
        if old is not None:
            tx.evict(old.id, EvictionReason.SUPERSEDED, f"replaced by {entry_id}")
        seq = (
            contract.contract_seq
            if contract and contract.contract_seq is not None
            else st.known_seq
        )
        entry = MemoryEntry(
            id=entry_id,
            serial=serial,
            key=key,
            suggestion=suggestion,
            dependencies=deps,
            rules=rule_vector(suggestion.rules),
            rules_version=(contract.rules_version if contract else None) or st.rules_version,
            contract_seq=seq,
            contract_epoch=(contract.contract_epoch if contract else None) or st.epoch,
            validated_seq=seq,
            validated_at=tx.now,
            provenance=Provenance(tx.episode, response_id, tx.now),
            derived_from=derived_from,
        )
        tx.add(entry, replaced=old.id if old is not None else None)
        if not self.strategy.invalidates:
            return
        mismatched: dict[str, tuple[str, str | None]] = {}
        for dep in deps:
            known = st.known.get(dep.table)
            if known is None:
                if dep.version:
                    st.known[dep.table] = dep.version
            elif known != dep.version:
                mismatched[dep.table] = (dep.version, known)
        if mismatched:
            self._on_moves(tx, mismatched)

    def _on_moves(self, tx: Ledger, moves: Mapping[str, tuple[str, str | None]]) -> None:
        """Hand version moves to the strategy, holding for revalidation those past the bound."""
        if self.trust.max_evictions_per_table is None:
            self.strategy.on_table_moves(tx, moves)
            return
        st = tx.state
        held = {
            table
            for table, (_, new) in moves.items()
            if new is not None
            and self.trust.bound_reached(st.stamp_evictions.get(table, ()), tx.now)
        }
        free = {table: move for table, move in moves.items() if table not in held}
        if free:
            before = len(tx.events)
            self.strategy.on_table_moves(tx, free)
            for event in tx.events[before:]:
                if isinstance(event, Evicted) and event.reason is EvictionReason.TABLE_CHANGED:
                    for table in set(tx.removed[event.entry_id].entry.tables) & set(free):
                        st.stamp_evictions.setdefault(table, []).append(tx.now)
            for table in free:
                if table in st.stamp_evictions:
                    st.stamp_evictions[table] = self.trust.recent(st.stamp_evictions[table], tx.now)
        for table in sorted(held):
            st.revalidating[table] = later(st.revalidating.get(table), tx.seq)
            old, new = moves[table]
            tx.emit(
                Ignored(
                    origin=tx.origin,
                    episode=tx.episode,
                    detail=(
                        f"{table} {old} -> {new}: {self.trust.max_evictions_per_table} stamp-driven"
                        f" evictions within window_s={self.trust.window_s:g}; revalidating through"
                        " /contract/changes instead of evicting"
                    ),
                )
            )

    def _revalidation_unavailable(self, tx: Ledger) -> None:
        """No changes feed: the held tables fall back to evicting what no longer matches."""
        st = tx.state
        for table in sorted(st.revalidating):
            current = st.known.get(table)
            for entry in tx.index.on_table(table):
                dep = entry.dependency(table)
                if dep is not None and dep.version != current:
                    detail = f"{table} moved to {current} and no changes feed is available"
                    tx.evict(entry.id, EvictionReason.TABLE_CHANGED, detail)
        st.revalidating.clear()

    def _distrust(self, tx: Ledger, doubt: str, suggestions: Sequence[Suggestion] = ()) -> None:
        """A contract the trust policy rejects: report it, act on none of it."""
        detail = f"unverified contract: {doubt}"
        tx.emit(Ignored(origin=tx.origin, episode=tx.episode, detail=detail))
        for suggestion in suggestions:
            tx.emit(
                NotStored(
                    origin=tx.origin,
                    episode=tx.episode,
                    suggestion_type=suggestion.type,
                    reason=detail,
                )
            )


def _feed_of(feed: ChangesFeed, tables: set[str], *, keep: bool) -> ChangesFeed:
    """The part of a feed about ``tables`` (``keep``) or about every other table."""
    return feed.model_copy(
        update={
            "rows": [r for r in feed.rows if (r.table in tables) == keep],
            "tables": [t for t in feed.tables if (t.table in tables) == keep],
            "rules": [] if keep else feed.rules,
        }
    )


def _instance(body: Mapping[str, Any]) -> str | None:
    instance = body.get("instance")
    return instance if isinstance(instance, str) else None


def _first(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error.get("loc", ())) or "body"
    return f"{where}: {error.get('msg', 'invalid')}"
