"""The async twins of the rest of ``FixMemory``'s surface: reading it, evicting, feeding answers.

``client.aio`` covers what an agent loop calls per request; these cover the operator's and the
adapter's side — ``aentries``, ``atombstones``, ``astats``, ``astate``, ``aorigins``,
``acontract_since``, ``aevict``, ``aset_patchable``, ``aapply_changes``, ``aapply_rules``,
``aresync_required`` and ``aneed_failed``. Each runs the very ``Steps`` its sync twin runs through
``Store.abatch`` (or, for the paged tombstone and origin listings, the sync reader in a worker
thread), so an async agent never blocks its event loop on the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from ..protocol.models import ChangesFeed, RulesListing
from .entries import EvictionReason, MemoryEntry, Tombstone
from .events import Need, Observation
from .layout import load_tombstones, stored_origins
from .serving import Serving
from .signals import Signals
from .state import OriginState
from .stats import OriginStats
from .steps import run_async
from .stores import Store
from .strategies import Strategy
from .transaction import Transactions


class AsyncSurface:
    """The async reading, eviction and answer-feeding calls of ``FixMemory``."""

    store: Store
    strategy: Strategy
    _calls: Transactions
    _signals: Signals
    _serving: Serving

    async def aentries(self, origin: str) -> list[MemoryEntry]:
        """``entries``: the origin's live entries, in the order they were stored."""
        replica = await run_async(self.store, self._calls.fresh(origin))
        with self._calls.lock:
            return list(replica.index)

    async def atombstones(self, origin: str) -> list[Tombstone]:
        """``tombstones``: the origin's evicted entries, in the order they were evicted."""
        return await asyncio.to_thread(load_tombstones, self.store, origin)

    async def astats(self, origin: str) -> OriginStats:
        """``stats``: the origin's counters, as committed plus this process's unwritten ones."""
        replica = await run_async(self.store, self._calls.fresh(origin))
        with self._calls.lock:
            return replica.counters

    async def astate(self, origin: str) -> OriginState:
        """``state``: a copy of what the memory knows of the origin's contract."""
        replica = await run_async(self.store, self._calls.fresh(origin))
        with self._calls.lock:
            return replica.state.copy()

    async def aorigins(self) -> list[str]:
        """``origins``: every origin the store holds a memory of."""
        return await asyncio.to_thread(stored_origins, self.store)

    async def acontract_since(self, origin: str) -> int | None:
        """``contract_since``: the seq the memory's known versions are accurate at."""
        if not self.strategy.invalidates:
            return None
        return (await self.astate(origin)).known_seq

    async def aevict(
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
        """``evict``: entries by id, by table, or all of an origin's; ids not live are ignored."""
        targets = None if everything or table is not None else entry_ids
        by_table = None if everything else table
        steps = self._signals.evict(origin, targets, by_table, reason, detail, episode)
        return await run_async(self.store, steps)

    async def aset_patchable(self, origin: str, paths: Iterable[str]) -> None:
        """``set_patchable``: record the request paths ``origin`` lets the client patch."""
        await run_async(self.store, self._serving.set_patchable(origin, paths))

    async def aapply_changes(
        self,
        origin: str,
        feed: ChangesFeed | Mapping[str, Any],
        *,
        episode: int | None = None,
        signature: str | None = None,
    ) -> Observation:
        """``apply_changes``: feed a ``GET /contract/changes`` answer."""
        steps = self._signals.apply_changes(origin, feed, episode, signature)
        return await run_async(self.store, steps)

    async def aapply_rules(
        self,
        origin: str,
        listing: RulesListing | Mapping[str, Any],
        *,
        episode: int | None = None,
        signature: str | None = None,
    ) -> Observation:
        """``apply_rules``: feed a ``GET /contract/rules`` answer."""
        steps = self._signals.apply_rules(origin, listing, episode, signature)
        return await run_async(self.store, steps)

    async def aresync_required(
        self,
        origin: str,
        *,
        episode: int | None = None,
        problem: Mapping[str, Any] | None = None,
        signature: str | None = None,
    ) -> Observation:
        """``resync_required``: the server answered 410; evict all the origin's entries."""
        steps = self._signals.resync_required(origin, episode, problem, signature)
        return await run_async(self.store, steps)

    async def aneed_failed(self, need: Need, *, episode: int | None = None) -> Observation:
        """``need_failed``: a need could not be fulfilled; fall back conservatively."""
        return await run_async(self.store, self._signals.need_failed(need, episode))
