"""Serving: which entries a request gets, and client apply mode's patches.

A lookup serves the entries of the request's operation whose scope the draft matches, less those
the trust policy or the strategy holds back. In client apply mode, each entry's patch is applied
behind a ``test`` of its scope, so an entry chosen on the task's draft patches only a planned
request it fits. Each call is a ``Steps`` run by ``CallRunner``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..protocol.models import PatchOperation, field_pointer
from .entries import EvictionReason, MemoryEntry
from .events import MemoryEvent, Need, Served
from .patching import PatchRefused, apply_patch, as_pointer
from .policies import Policies
from .shared.ledger import Ledger
from .shared.steps import Steps
from .strategies import Strategy
from .transaction import CallRunner
from .trust import TrustPolicy


@dataclass(frozen=True, slots=True)
class Lookup:
    """What a lookup served, in store order, and the events it caused.

    ``needs``: what must be fetched (and answered) before the memory serves all it holds, e.g.
    the conditional read that confirms an origin not yet confirmed by this process.
    """

    entries: tuple[MemoryEntry, ...]
    events: tuple[MemoryEvent, ...]
    needs: tuple[Need, ...] = ()


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


class Serving:
    """Lookups and patches under one strategy and trust policy."""

    def __init__(
        self,
        calls: CallRunner,
        strategy: Strategy,
        trust: TrustPolicy,
        policies: Policies | None = None,
    ) -> None:
        self.calls = calls
        self.strategy = strategy
        self.trust = trust
        self.policies = policies if policies is not None else Policies(strategy)

    def lookup(
        self, origin: str, draft: Mapping[str, Any], episode: int | None, operation: str | None
    ) -> Steps[Lookup]:
        def work(tx: Ledger) -> tuple[MemoryEntry, ...]:
            tx.stats.lookups += 1
            served: list[MemoryEntry] = []
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

        call = yield from self.calls.run(origin, episode, work, operation=operation)
        return Lookup(call.result, tuple(call.tx.events), call.needs)

    def fixes_for(self, origin: str, episode: int | None, operation: str) -> Steps[Lookup]:
        """Every entry of ``operation`` a lookup could serve, whatever the draft: what a prompt
        written before the model has drafted anything may list (L2). Not counted as a lookup."""

        def work(tx: Ledger) -> tuple[MemoryEntry, ...]:
            if not self.strategy.stores:
                return ()
            mine = [entry for entry in tx.index if entry.key.operation == operation]
            served = [entry for entry in mine if self._serves(tx, entry)]
            for entry in served:
                tx.emit(Served(origin=origin, episode=tx.episode, entry_id=entry.id, key=entry.key))
            return tuple(served)

        call = yield from self.calls.run(origin, episode, work, operation=operation)
        return Lookup(call.result, tuple(call.tx.events))

    def _serves(self, tx: Ledger, entry: MemoryEntry) -> bool:
        """Whether a lookup may serve a matching entry (quarantining or evicting it otherwise)."""
        if entry.id in tx.announced:
            return False  # another writer is committing its eviction (``client.shared.turn``)
        if not entry.key.scope_items and not entry.suggestion.origin_wide:
            tx.quarantine(entry.id, "its scope is empty and the server did not mark it origin_wide")
            return False
        if not entry.key.scope_items and not self.trust.allow_origin_wide:
            tx.quarantine(entry.id, "the trust policy does not keep origin-wide fixes")
            return False
        if self.trust.guard_parameters:
            refused = self.trust.injection(entry.suggestion, tx.state.patchable)
            if refused is not None:
                tx.quarantine(entry.id, refused)
                return False
        if not self.policies.of(tx).serves(tx, entry):
            return False
        if self.strategy.invalidates and tx.state.policy is None:
            if self.calls.confirmations.pending(tx):
                return False  # not confirmed since this process (or connection) started
            expiry = self.trust.expiry(entry, tx.now)
            if expiry is not None:
                tx.evict(entry.id, EvictionReason.MAX_AGE, expiry)
                return False
            if self.strategy.withholds(tx.state, entry):
                return False
        return True

    def set_patchable(self, origin: str, paths: Iterable[str]) -> Steps[None]:
        checked = sorted({as_pointer(path) for path in paths})

        def work(tx: Ledger) -> None:
            tx.state.patchable = checked

        yield from self.calls.run(origin, None, work)

    def set_contract_location(self, origin: str, base: str) -> Steps[None]:
        def work(tx: Ledger) -> None:
            tx.state.contract_location = base

        yield from self.calls.run(origin, None, work)

    def apply_patches(
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
                    result = apply_patch(current, scoped_patch(entry), patchable)
                except PatchRefused as exc:
                    tx.quarantine(entry.id, str(exc))
                    continue
                if result.applied:
                    current = result.request
                    applied.append(entry.id)
                else:
                    skipped.append((entry.id, result.reason or "does not apply"))
            return PatchOutcome(current, tuple(applied), tuple(skipped), ())

        call = yield from self.calls.run(origin, episode, work)
        done = call.result
        return PatchOutcome(done.request, done.applied, done.skipped, tuple(call.tx.events))


def scoped_patch(entry: MemoryEntry) -> list[PatchOperation]:
    """The entry's patch, preceded by a ``test`` of each scope field: it applies only in scope."""
    tests = [
        PatchOperation(op="test", path=field_pointer(name), value=value)
        for name, value in entry.key.scope_items
    ]
    return tests + list(entry.suggestion.patch or ())


def _not_applicable(tx: Ledger, entry: MemoryEntry, operation: str | None) -> str | None:
    if entry.id not in tx.index:
        return "no longer live"
    if operation is not None and entry.operation != operation:
        return f"learned on operation {entry.operation!r}, not {operation!r}"
    if not entry.suggestion.patch:
        return "no patch; left to the planner"
    return None
