"""How an episode reaches the provider: the shipped httpx transport, or an MCP session.

A ``Channel`` sends one planned request and returns what came back (the raw body, for the memory
and the oracle), fetches the memory's needs through the same loop an agent uses, and settles after
a drift event (a server in another process must have heard of it before the next episode). Both
channels feed the same ``FixMemory`` with the same events, so a run's validity figures do not
depend on the channel (tests/mcp pins that).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from ..client.events import MemoryEvent, Need
from ..client.transport import (
    EPISODE_EXTENSION,
    INJECTED_EXTENSION,
    LISTENER_EXTENSION,
    OPERATION_EXTENSION,
    WIRE_COST_EXTENSION,
    AsyncContractTransport,
    is_json,
)
from ..protocol.wirecost import WireCost, wire_cost
from ..server import Route

Listener = Callable[[MemoryEvent], None]


@dataclass(frozen=True, slots=True)
class Reply:
    """One answer: its status, its JSON object body as received (``{}`` if none), its size."""

    status: int
    body: dict[str, Any]
    size: int
    cost: WireCost


def route_operation(route: Route[Any]) -> str:
    """A route as an operation: ``POST /v1/subscriptions``."""
    return f"{route.method.upper()} {route.path}"


class Channel(Protocol):
    """What an episode talks to the provider through: any route of the catalog's domain."""

    def operation(self, route: Route[Any]) -> str:
        """The operation fixes learned on ``route`` are filed and looked up under (the route, or
        the tool that serves it)."""
        ...

    async def send(
        self,
        request: dict[str, Any],
        *,
        route: Route[Any],
        episode: int,
        injected: list[str],
        listener: Listener,
    ) -> Reply: ...

    async def fulfil(
        self, needs: Iterable[Need], *, episode: int, listener: Listener
    ) -> tuple[Need, ...]: ...

    async def drifted(self, result: Mapping[str, Any]) -> None:
        """After a drift event (the admin answer ``result``): return once the serving side
        answers from the new state."""
        ...

    def take_events(self) -> list[MemoryEvent]:
        """The memory events no request caused (a notification's refresh), oldest first; each
        is handed out once."""
        ...


class HttpChannel:
    """The domain's routes over ``AsyncContractTransport`` (what an httpx agent runs)."""

    def __init__(self, client: httpx.AsyncClient, transport: AsyncContractTransport) -> None:
        self.client = client
        self.transport = transport

    def operation(self, route: Route[Any]) -> str:
        return route_operation(route)

    async def send(
        self,
        request: dict[str, Any],
        *,
        route: Route[Any],
        episode: int,
        injected: list[str],
        listener: Listener,
    ) -> Reply:
        response = await self.client.request(
            route.method.upper(),
            route.path,
            json=request,
            extensions={
                EPISODE_EXTENSION: episode,
                INJECTED_EXTENSION: injected,
                OPERATION_EXTENSION: self.operation(route),
                LISTENER_EXTENSION: listener,
            },
        )
        body = _json_object(response)
        cost = response.extensions.get(WIRE_COST_EXTENSION)
        if not isinstance(cost, WireCost):
            cost = wire_cost(body)
        return Reply(response.status_code, body, len(response.content), cost)

    async def fulfil(
        self, needs: Iterable[Need], *, episode: int, listener: Listener
    ) -> tuple[Need, ...]:
        return await self.transport.fulfil(needs, episode=episode, listener=listener)

    async def drifted(self, result: Mapping[str, Any]) -> None:
        """The admin route and the domain route share one registry: nothing to wait for."""

    def take_events(self) -> list[MemoryEvent]:
        """Over HTTP the memory only hears of the server in answers to requests: none."""
        return []


def _json_object(response: httpx.Response) -> dict[str, Any]:
    """The response body when it is a JSON object; otherwise an empty object."""
    if not is_json(response):
        return {}
    try:
        body = json.loads(response.content)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
