"""The upstream's notifications, passed on to the host.

A list change (tools, resources, prompts) goes to every host connection the proxy has served a
request on (protocol revisions before 2026-07-28) and to the ``subscriptions/listen`` bus (from
2026-07-28); a ``resources/updated`` goes to the connections that subscribed to its URI, and to
the bus. Progress rides on each tool call's own callback (``link.PROGRESS``), log messages go to
the proxy's log; anything else the upstream sends is logged as not passed on, never dropped
unsaid. The contract's own resources are the proxy's (its memory listens to them), not the host's.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import mcp_types as types
from mcp.client.session import IncomingMessage
from mcp.server.subscriptions import (
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    SubscriptionBus,
    ToolsListChanged,
)

from ..notify import MAX_SUBSCRIBED_CONNECTIONS, _connection_key

if TYPE_CHECKING:
    from mcp.server.session import ServerSession

logger = logging.getLogger("invalidation_contracts.proxy")


def is_contract_uri(uri: str) -> bool:
    """Whether ``uri`` names one of the contract's resources (kept from the host)."""
    return uri.startswith("contract:")


class HostNotifier:
    """The host connections the proxy knows of, and what each subscribed to."""

    def __init__(self, bus: SubscriptionBus) -> None:
        self.bus = bus
        self._hosts: OrderedDict[int, tuple[ServerSession, set[str]]] = OrderedDict()
        self.listened: set[str] = set()
        """URIs a ``subscriptions/listen`` stream asked for (2026-07-28 hosts)."""

    def seen(self, session: ServerSession) -> None:
        """A request came on ``session``'s connection (it is told of list changes)."""
        key = _connection_key(session)
        _, uris = self._hosts.pop(key, (session, set()))
        self._hosts[key] = (session, uris)
        while len(self._hosts) > MAX_SUBSCRIBED_CONNECTIONS:
            self._hosts.popitem(last=False)

    def subscribe(self, session: ServerSession, uri: str) -> None:
        self.seen(session)
        self._hosts[_connection_key(session)][1].add(uri)

    def unsubscribe(self, session: ServerSession, uri: str) -> None:
        entry = self._hosts.get(_connection_key(session))
        if entry is not None:
            entry[1].discard(uri)

    def subscribed(self) -> set[str]:
        """Every URI some host connection subscribed to (subscribed upstream again after a
        reconnection)."""
        return self.listened | {uri for _, uris in self._hosts.values() for uri in uris}

    async def forward(self, message: IncomingMessage) -> None:
        """Pass one upstream notification on to the host."""
        if isinstance(message, types.ResourceUpdatedNotification):
            uri = str(message.params.uri)
            if not is_contract_uri(uri):
                await self.bus.publish(ResourceUpdated(uri=uri))
                await self._send(lambda s: s.send_resource_updated(uri), uri)
        elif isinstance(message, types.ToolListChangedNotification):
            await self.bus.publish(ToolsListChanged())
            await self._send(lambda s: s.send_tool_list_changed())
        elif isinstance(message, types.ResourceListChangedNotification):
            await self.bus.publish(ResourcesListChanged())
            await self._send(lambda s: s.send_resource_list_changed())
        elif isinstance(message, types.PromptListChangedNotification):
            await self.bus.publish(PromptsListChanged())
            await self._send(lambda s: s.send_prompt_list_changed())
        elif not isinstance(message, Exception):
            method = getattr(message, "method", type(message).__name__)
            logger.info("not passed on to the host: the upstream's %s", method)

    async def _send(
        self, send: Callable[[ServerSession], Awaitable[None]], uri: str | None = None
    ) -> None:
        for key, (session, uris) in list(self._hosts.items()):
            if uri is not None and uri not in uris:
                continue
            try:
                await send(session)
            except Exception:  # a connection that went away: forget it
                logger.debug("dropped a host connection: it is closed")
                self._hosts.pop(key, None)
