"""Push ``resources/updated`` for the contract resources whenever the registry's state moves.

The registry tells its listeners of every move (a write in this worker, or changes adopted from
other workers: ``Registry.subscribe``), in the writer's thread. The notifier only records which
resources moved and wakes its pump on the server's event loop; the pump publishes one event per
moved resource to the ``subscriptions/listen`` bus (protocol 2026-07-28) and to each session that
subscribed with ``resources/subscribe`` (earlier revisions); there, the event for
``contract://events`` carries the cursor of the new position in its ``_meta`` (a listen stream's
``_meta`` is the SDK's, so a listener polls from its own cursor). Moves that happen while the
pump is busy are coalesced: a storm of writes costs each subscriber at most one event per
resource and round. Needs the asyncio backend (the SDK's default).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server.subscriptions import ResourceUpdated, SubscriptionBus

from ..server.registry import Registry
from ..server.state import RegistryState
from . import events, names

if TYPE_CHECKING:
    from mcp.server.session import ServerSession

logger = logging.getLogger(__name__)

#: Connections subscribed with ``resources/subscribe`` kept at most (the oldest is dropped).
MAX_SUBSCRIBED_CONNECTIONS = 1024


def moved(before: RegistryState, after: RegistryState, *, graph: bool) -> set[str]:
    """The contract resources whose content differs between two states."""
    uris: set[str] = set()
    new_history = before.epoch != after.epoch
    if new_history or before.seq != after.seq:
        uris.add(names.VERSIONS)
        uris.add(names.EVENTS)
        if graph:
            uris.add(names.GRAPH)
    if new_history or before.rules_changed_at != after.rules_changed_at:
        uris.add(names.RULES)
    return uris


class ChangeNotifier:
    """The registry's moves, as ``resources/updated`` events for the contract resources."""

    def __init__(self, registry: Registry, bus: SubscriptionBus, *, graph: bool) -> None:
        self.registry = registry
        self.bus = bus
        self.graph = graph
        self._subscribers: OrderedDict[int, tuple[ServerSession, set[str]]] = OrderedDict()
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._users = 0

    def subscribe(self, session: ServerSession, uri: str) -> None:
        """``resources/subscribe`` (protocol revisions before 2026-07-28).

        ``session`` is the request's ``ServerSession``: it sends on its connection's standalone
        stream after the request, as the SDK advises. Each request has its own, so subscribers
        are keyed by their connection (its ``client_params``) and bounded in number.
        """
        key = _connection_key(session)
        _, uris = self._subscribers.pop(key, (session, set()))
        uris.add(uri)
        self._subscribers[key] = (session, uris)
        while len(self._subscribers) > MAX_SUBSCRIBED_CONNECTIONS:
            self._subscribers.popitem(last=False)

    def unsubscribe(self, session: ServerSession, uri: str) -> None:
        entry = self._subscribers.get(_connection_key(session))
        if entry is not None:
            entry[1].discard(uri)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Follow the registry while the server runs (nested entries share one pump)."""
        if self._users:
            self._users += 1
            try:
                yield
            finally:
                self._users -= 1
            return
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        unsubscribe = self.registry.subscribe(self._moved)
        pump = asyncio.ensure_future(self._pump(self._wake))
        self._users = 1
        try:
            yield
        finally:
            self._users = 0
            unsubscribe()
            pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pump
            self._loop = self._wake = None

    def _moved(self, before: RegistryState, after: RegistryState) -> None:
        """The registry's listener: in the writer's thread, so it only records and wakes."""
        uris = moved(before, after, graph=self.graph)
        loop, wake = self._loop, self._wake
        if not uris or loop is None or wake is None:
            return
        with self._lock:
            self._pending |= uris
        try:
            loop.call_soon_threadsafe(wake.set)
        except RuntimeError:  # the loop closed: the server is stopping
            pass

    async def _pump(self, wake: asyncio.Event) -> None:
        while True:
            await wake.wait()
            wake.clear()
            with self._lock:
                uris, self._pending = sorted(self._pending), set()
            for uri in uris:
                await self.publish(uri)

    async def publish(self, uri: str) -> None:
        """One ``resources/updated`` for ``uri`` to every subscriber, of either protocol era."""
        await self.bus.publish(ResourceUpdated(uri=uri))
        meta: dict[str, Any] | None = None
        if uri == names.EVENTS:
            state = self.registry.state
            meta = {names.CURSOR: events.cursor_for(state.seq, state.epoch)}
        updated = types.ResourceUpdatedNotification(
            params=types.ResourceUpdatedNotificationParams(uri=uri, _meta=meta)
        )
        for key, (session, uris) in list(self._subscribers.items()):
            if uri not in uris:
                continue
            try:
                await session.send_notification(updated)
            except Exception:  # a connection that went away: forget it
                logger.debug("dropped a subscriber of %s: its connection is closed", uri)
                self._subscribers.pop(key, None)


def _connection_key(session: ServerSession) -> int:
    """One key per connection: its ``client_params`` object (the request's session, if none)."""
    params = getattr(session, "client_params", None)
    return id(params if params is not None else session)
