"""Eager detection without polling: ``resources/updated`` for the contract's versions, acted on.

A ``Watcher`` is poked by every notification that ``contract://versions`` moved (from a
``subscriptions/listen`` stream on 2026-07-28 connections, or the session's message handler after
``resources/subscribe`` on earlier ones) and refreshes: it reads the versions and feeds them to
the memory, which evicts what the move made stale. From the notification until that refresh has
read past it the memory withholds the origin's fixes (``FixMemory.announced``), so no lookup made
meanwhile serves a stale one. Pokes that
arrive while it refreshes are coalesced into one more refresh, so a storm of notifications costs
at most one read in flight; what a storm of real bumps may evict is bounded by the trust
policy's eviction-rate bound.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Awaitable, Callable

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.subscriptions import SubscriptionLost, listen
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from . import names

logger = logging.getLogger(__name__)

#: Seconds before a dropped ``subscriptions/listen`` stream is opened again.
RELISTEN_DELAY_S = 1.0

Refresh = Callable[[], Awaitable[int | None]]
"""Read the versions into the memory; returns the ``contract_seq`` it saw (None: none)."""


class Watcher:
    """Coalesces pokes into refreshes, and lets a caller wait until one has seen a position."""

    def __init__(
        self,
        refresh: Refresh,
        *,
        on_lost: Callable[[], None] | None = None,
        on_announced: Callable[[], None] | None = None,
    ) -> None:
        self._refresh = refresh
        self._on_lost = on_lost
        self._on_announced = on_announced
        self._poked = anyio.Event()
        self._progress = anyio.Event()
        self.seen: int = -1
        """The highest ``contract_seq`` a completed refresh saw (-1: none yet)."""
        self.refreshes = 0

    def lost(self) -> None:
        """The notifications stopped for a while: what moved meanwhile must be read before the
        memory serves again (the refresh that follows confirms it)."""
        if self._on_lost is not None:
            self._on_lost()
        self.poke()

    def announced(self) -> None:
        """The server said the versions moved: the memory withholds the origin's fixes at once
        (until the refresh has read past the change), then a refresh is asked for."""
        if self._on_announced is not None:
            self._on_announced()
        self.poke()

    def poke(self) -> None:
        """Ask for a refresh (never blocks; many pokes before it runs make one refresh)."""
        self._poked.set()

    async def run(self) -> None:
        """Refresh on every poke, until cancelled."""
        while True:
            await self._poked.wait()
            self._poked = anyio.Event()
            try:
                seq = await self._refresh()
            except Exception:  # a failed refresh is retried on the next poke
                logger.warning("refreshing the contract after a notification failed", exc_info=True)
                seq = None
            self.refreshes += 1
            if self._poked.is_set() and self._on_announced is not None:
                # told again while it read: what it read may predate that change, so the origin
                # stays withheld until the next refresh (which the poke asks for)
                self._on_announced()
            if seq is not None:
                self.seen = max(self.seen, seq)
            progress, self._progress = self._progress, anyio.Event()
            progress.set()

    async def caught_up(self, seq: int, *, timeout_s: float = math.inf) -> None:
        """Wait until a refresh saw ``contract_seq`` ``seq`` or later and none is asked for
        (the memory then withholds nothing for an announcement; ``TimeoutError`` after
        ``timeout_s``)."""
        with anyio.fail_after(timeout_s):
            while self.seen < seq or self._poked.is_set():
                await self._progress.wait()


async def follow(session: ClientSession, watcher: Watcher) -> None:
    """Keep the server telling ``watcher`` that the versions moved, for the session's life.

    On a 2026-07-28 connection: a ``subscriptions/listen`` stream, opened again (with a refresh,
    since there is no replay) when it drops. Earlier: one ``resources/subscribe``; the
    notifications then reach the session's message handler (``ContractSession.on_message``).
    """
    if session.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated at 2026-07-28, the way before it
            await session.subscribe_resource(names.VERSIONS)
        watcher.poke()  # what moved before the subscription took effect
        return
    while True:
        try:
            async with listen(session, resource_subscriptions=[names.VERSIONS]) as subscription:
                watcher.poke()  # what moved before the stream was acknowledged
                async for event in subscription:
                    if getattr(event, "uri", None) == names.VERSIONS:
                        watcher.announced()
            return  # the server closed the stream gracefully: it is shutting down
        except SubscriptionLost:
            logger.info("the listen stream dropped; listening again")
            watcher.lost()
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                return
            logger.warning("subscriptions/listen failed: %s; retrying", exc)
        await anyio.sleep(RELISTEN_DELAY_S)
