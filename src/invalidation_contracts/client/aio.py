"""The async twins of ``FixMemory``'s calls: the same calls, with store I/O off the event loop.

Each runs the very ``Steps`` its sync twin runs, through ``Store.abatch`` (a worker thread for the
SQLite and PostgreSQL stores), so an async agent — or ``AsyncContractTransport`` — never blocks
its loop on the store. Reads that find the store unchanged do no I/O at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..protocol.headers import CONTRACT_EPOCH, CONTRACT_SINCE
from ..protocol.position import valid_epoch, valid_seq
from .entries import MemoryEntry
from .events import Need, Observation
from .ledger import Ledger
from .limits import Refusal
from .serving import Lookup, PatchOutcome, Serving
from .signals import Response, Signals
from .steps import run_async
from .stores import Store
from .strategies import Strategy
from .transaction import Transactions


class AsyncCalls:
    """``abegin_episode``, ``aneeds``, ``alookup``, ``arelevant``, ``afixes_for``, ``aobserve``,
    ``aanswer``, ``afetch_failed``, ``aapply_patches``, ``aconditional_headers`` and ``aclose``."""

    store: Store
    strategy: Strategy
    _calls: Transactions
    _signals: Signals
    _serving: Serving
    _owns_store: bool

    async def abegin_episode(self, origin: str, episode: int) -> list[Need]:
        return await run_async(self.store, self._signals.begin_episode(origin, episode))

    async def aneeds(self, origin: str) -> list[Need]:
        call = await run_async(self.store, self._calls.run(origin, None, nothing))
        return list(call.needs)

    async def alookup(
        self,
        origin: str,
        draft: Mapping[str, Any],
        *,
        episode: int | None = None,
        operation: str | None = None,
    ) -> Lookup:
        return await run_async(self.store, self._serving.lookup(origin, draft, episode, operation))

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

    async def afixes_for(
        self, origin: str, operation: str, *, episode: int | None = None
    ) -> list[MemoryEntry]:
        found = await run_async(self.store, self._serving.fixes_for(origin, episode, operation))
        return list(found.entries)

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
        refused: Refusal | None = None,
    ) -> Observation:
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
        steps = self._signals.observe(origin, response, episode, operation)
        return await run_async(self.store, steps)

    async def aanswer(
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
        steps = self._signals.answer(need, status, body, episode, signature, body_bytes, refused)
        return await run_async(self.store, steps)

    async def afetch_failed(
        self, need: Need, detail: str, *, episode: int | None = None
    ) -> Observation:
        return await run_async(self.store, self._signals.fetch_failed(need, detail, episode))

    async def aapply_patches(
        self,
        origin: str,
        request: Mapping[str, Any],
        entries: Sequence[MemoryEntry],
        *,
        episode: int | None = None,
        operation: str | None = None,
    ) -> PatchOutcome:
        steps = self._serving.apply_patches(origin, request, entries, episode, operation)
        return await run_async(self.store, steps)

    async def aconditional_headers(self, origin: str) -> dict[str, str]:
        if not self.strategy.invalidates:
            return {}
        replica = await run_async(self.store, self._calls.fresh(origin))
        return conditional_headers(replica.state.known_seq, replica.state.epoch)

    async def aclose(self) -> None:
        try:
            for origin in self._calls.unflushed():
                await run_async(self.store, self._calls.flush(origin))
        finally:
            if self._owns_store:
                self.store.close()


def conditional_headers(since: int | None, epoch: str | None) -> dict[str, str]:
    """``Contract-Since`` (and ``Contract-Epoch``) for a known position; empty without one, or
    when the stored position does not validate (the next memory call drops it)."""
    if since is None or not valid_seq(since) or (epoch is not None and not valid_epoch(epoch)):
        return {}
    return {CONTRACT_SINCE: str(since), **({CONTRACT_EPOCH: epoch} if epoch else {})}


def nothing(tx: Ledger) -> None:
    """A call that changes nothing: it only brings the replica current and reports the needs."""
