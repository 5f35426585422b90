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
from ..httpx import (
    EPISODE_EXTENSION,
    INJECTED_EXTENSION,
    LISTENER_EXTENSION,
    OPERATION_EXTENSION,
    WIRE_COST_EXTENSION,
    AsyncContractTransport,
)
from ..httpx.exchange import is_json
from ..protocol.wirecost import WireCost, wire_cost
from ..server import Route
from .errors import ServerUnavailable

Listener = Callable[[MemoryEvent], None]


@dataclass(frozen=True, slots=True)
class Reply:
    """One answer: its status, its JSON object body as received (``{}`` if none), its size."""

    status: int
    body: dict[str, Any]
    size: int
    cost: WireCost


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One attempt as the episode hands it to its channel: the planned request, the route it goes
    to, the episode, the ids of the memory entries injected into it, and the listener this
    request's memory events go to."""

    request: dict[str, Any]
    route: Route[Any]
    episode: int
    injected: list[str]
    listener: Listener


def route_operation(route: Route[Any]) -> str:
    """A route as an operation: ``POST /v1/subscriptions``."""
    return f"{route.method.upper()} {route.path}"


class Channel(Protocol):
    """What an episode talks to the provider through: any route of the catalog's domain."""

    def operation(self, route: Route[Any]) -> str:
        """The operation fixes learned on ``route`` are filed and looked up under (the route, or
        the tool that serves it)."""
        ...

    async def send(self, outgoing: Outgoing) -> Reply: ...

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


#: The run transports that go through an agent framework's integration (``framework_channel``;
#: each is also the name of the extra it needs).
FRAMEWORK_TRANSPORTS = ("pydantic-ai", "openai-agents", "langchain")

#: Seconds the watch may take to bring the memory to a drift event's position.
SETTLE_TIMEOUT_S = 30.0


class HttpChannel:
    """The domain's routes over ``AsyncContractTransport`` (what an httpx agent runs).

    With ``watch`` the transport keeps the watch stream open (SPEC §8.4): after a drift event the
    channel waits until the watch has brought the memory to the event's position, and the events
    of those refreshes (no request caused them) are handed out by ``take_events``."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        transport: AsyncContractTransport,
        *,
        origin: str | None = None,
        watch: bool = False,
        background: list[MemoryEvent] | None = None,
    ) -> None:
        if watch and origin is None:
            raise ValueError("a watching channel needs the origin its watch is keyed by")
        self.client = client
        self.transport = transport
        self.origin = origin
        self.watch = watch
        self._background = background if background is not None else []

    def operation(self, route: Route[Any]) -> str:
        return route_operation(route)

    async def send(self, outgoing: Outgoing) -> Reply:
        route = outgoing.route
        response = await self.client.request(
            route.method.upper(),
            route.path,
            json=outgoing.request,
            extensions={
                EPISODE_EXTENSION: outgoing.episode,
                INJECTED_EXTENSION: outgoing.injected,
                OPERATION_EXTENSION: self.operation(route),
                LISTENER_EXTENSION: self._own(outgoing.listener),
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
        return await self.transport.fulfil(needs, episode=episode, listener=self._own(listener))

    def _own(self, listener: Listener) -> Listener:
        """``listener``, taking back from the background list what a request of the episode
        caused: the transport hands every event to its own listener first, then the request's."""
        if not self.watch:
            return listener

        def own(event: MemoryEvent) -> None:
            for at in range(len(self._background) - 1, -1, -1):
                if self._background[at] is event:
                    del self._background[at]
                    break
            listener(event)

        return own

    async def drifted(self, result: Mapping[str, Any]) -> None:
        """The admin route and the domain route share one registry, so the server answers from
        the new state at once; with the watch, wait until the memory has read it too."""
        seq = result.get("contract_seq")
        if not self.watch or not isinstance(seq, int) or self.origin is None:
            return
        reached = await self.transport.watches.acaught_up(
            self.origin, seq, timeout_s=SETTLE_TIMEOUT_S
        )
        if not reached:
            raise ServerUnavailable(
                f"the watch stream did not bring the memory to seq {seq} within "
                f"{SETTLE_TIMEOUT_S:.0f} s"
            )

    def take_events(self) -> list[MemoryEvent]:
        """What the watch's refreshes did since the last call (without the watch the memory only
        hears of the server in answers to requests: none)."""
        events, self._background[:] = list(self._background), []
        return events


def _json_object(response: httpx.Response) -> dict[str, Any]:
    """The response body when it is a JSON object; otherwise an empty object."""
    if not is_json(response):
        return {}
    try:
        body = json.loads(response.content)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}
