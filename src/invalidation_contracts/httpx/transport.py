"""httpx integration: a transport that feeds every response of a wrapped client to a fix memory.

An existing agent gains the contract by wrapping its client's transport::

    memory = FixMemory("row", store="memory.db")
    client = httpx.Client(transport=ContractTransport(memory), base_url="https://api.example")
    fixes = memory.lookup("https://api.example", draft, operation="POST /v1/subscriptions").entries
    client.post("/v1/subscriptions", json=draft,
                extensions={INJECTED_EXTENSION: [f.id for f in fixes], EPISODE_EXTENSION: 7})

The transport observes each response, fulfils the memory's needs (``/contract/changes``,
``/contract/rules``) through the wrapped transport, and sends ``Contract-Since`` so the server may
answer with a delta of ``table_versions``. Only JSON responses are read (others, streams included,
pass through untouched), and only up to ``Limits.max_body_bytes``; a need's answer is read
incrementally and abandoned at ``Limits.max_feed_bytes``. Failures of those contract fetches
never fail the agent's request: a 410 triggers a resync, another answer falls back
conservatively, and a network error is reported (a ``FetchFailed`` event and a warning) and
leaves the need outstanding for the next response.

Each request belongs to an operation, the key fixes are learned and served under: the
``OPERATION_EXTENSION`` request extension (a route template such as ``POST /v1/orders/{id}``, or
a tool name), else ``METHOD path`` of the URL (``operation_of``).

A caller that needs every event one request caused (the harness's oracle does) puts a callable in
the request's ``LISTENER_EXTENSION``; needs the memory returns outside a response (from
``begin_episode``) go through ``fulfil``, the same loop. Each JSON response's ``WireCost`` is left
in ``response.extensions[WIRE_COST_EXTENSION]``, measured once for the memory and the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from ..client.events import MemoryEvent, Need
from ..client.memory import AsyncFixMemory, FixMemory
from ..client.push import WatchOptions, watch_options
from ..client.shared.steps import adrive, drive
from .exchange import (
    FORWARDED_HEADERS,
    THROWN,
    ContractExchange,
    Effect,
    Exchange,
    MemoryCall,
    ReadBody,
    Send,
    overdue,
)
from .extensions import Listener, default_origin, template
from .watch import Watches

T = TypeVar("T")


class ContractTransport(httpx.BaseTransport):
    """A sync transport that wraps another and feeds every response to ``memory``."""

    def __init__(
        self,
        memory: FixMemory | AsyncFixMemory,
        transport: httpx.BaseTransport | None = None,
        *,
        origin_of: Callable[[httpx.URL], str] = default_origin,
        conditional: bool = True,
        listener: Callable[[MemoryEvent], None] | None = None,
        confirm: Iterable[str] = (),
        confirm_headers: Mapping[str, str] | None = None,
        watch: bool | WatchOptions = False,
    ) -> None:
        self.memory = FixMemory.over(memory)
        self.wrapped = transport if transport is not None else httpx.HTTPTransport()
        self._contract = ContractExchange(memory, origin_of, conditional, listener)
        self._opening = _Opening(tuple(confirm), confirm_headers)
        self.watches = Watches(self, watch_options(watch), listener)

    def __enter__(self) -> ContractTransport:
        self.wrapped.__enter__()
        for origin in self._opening.origins:
            self.confirm(origin, headers=self._opening.headers)
        return self

    def confirm(
        self,
        origin: str,
        *,
        listener: Listener | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[Need, ...]:
        """Confirm ``origin`` before its fixes are served: the memory's outstanding needs, among
        them one conditional read of what changed since its stored position (``client.
        confirmation``), fetched now. Returns what is still outstanding (a network error: the
        origin's entries stay withheld)."""
        self.memory.reopened(origin)
        return self.fulfil(self.memory.needs(origin), listener=listener, headers=headers)

    def contract_url(self, origin: str, path: str) -> httpx.URL:
        """Where ``origin`` serves the contract route ``path`` (``/contract/...``): under the
        location its responses' ``Link`` named, else at the root."""
        return self._contract.locations.url(origin, path)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._run(self._contract.exchange(request))
        self.watches.ensure(self._contract.origin_of(request.url), request)
        return response

    def fulfil(
        self,
        needs: Iterable[Need],
        *,
        episode: int | None = None,
        listener: Listener | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[Need, ...]:
        """Fetch needs the memory returned outside a response (``begin_episode``), feeding back each
        answer, for up to ``MAX_NEED_ROUNDS`` rounds: the loop every response goes through.

        ``listener`` gets the events, ``headers`` the credentials to forward. Returns the needs
        still outstanding (a network error, or more rounds wanted); the memory asks for them again.
        """
        return self._run(self._contract.rounds(tuple(needs), template(episode, listener, headers)))

    def _run(self, steps: Exchange[T]) -> T:
        return drive(steps, self._perform, THROWN)

    def _perform(self, effect: Effect) -> Any:
        """Carry out one effect of the steps, blocking."""
        if isinstance(effect, MemoryCall):
            return getattr(self.memory, effect.verb)(*effect.args, **effect.kwargs)
        if isinstance(effect, Send):
            return self.wrapped.handle_request(effect.request)
        if isinstance(effect, ReadBody):
            return self._contract.stream(effect.response, effect.body, effect.deadline)
        response = effect.response
        try:
            for chunk in () if response.is_stream_consumed else response.iter_raw():
                if not effect.body.feed(chunk) or overdue(effect.body, effect.deadline):
                    break
        finally:
            response.close()
        return None

    def close(self) -> None:
        self.watches.close()
        self.wrapped.close()


class AsyncContractTransport(httpx.AsyncBaseTransport):
    """The async twin of ``ContractTransport``: every memory call is the async one, so store
    I/O never blocks the event loop."""

    def __init__(
        self,
        memory: FixMemory | AsyncFixMemory,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        origin_of: Callable[[httpx.URL], str] = default_origin,
        conditional: bool = True,
        listener: Callable[[MemoryEvent], None] | None = None,
        confirm: Iterable[str] = (),
        confirm_headers: Mapping[str, str] | None = None,
        watch: bool | WatchOptions = False,
    ) -> None:
        self.memory = AsyncFixMemory.over(memory)
        self.wrapped = transport if transport is not None else httpx.AsyncHTTPTransport()
        self._contract = ContractExchange(memory, origin_of, conditional, listener)
        self._opening = _Opening(tuple(confirm), confirm_headers)
        self.watches = Watches(self, watch_options(watch), listener)

    async def __aenter__(self) -> AsyncContractTransport:
        await self.wrapped.__aenter__()
        for origin in self._opening.origins:
            await self.confirm(origin, headers=self._opening.headers)
        return self

    async def confirm(
        self,
        origin: str,
        *,
        listener: Listener | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[Need, ...]:
        """The async twin of ``ContractTransport.confirm``."""
        self.memory.reopened(origin)
        needs = await self.memory.needs(origin)
        return await self.fulfil(needs, listener=listener, headers=headers)

    def contract_url(self, origin: str, path: str) -> httpx.URL:
        """The async twin of ``ContractTransport.contract_url``."""
        return self._contract.locations.url(origin, path)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._run(self._contract.exchange(request))
        self.watches.ensure(self._contract.origin_of(request.url), request, asynchronous=True)
        return response

    async def fulfil(
        self,
        needs: Iterable[Need],
        *,
        episode: int | None = None,
        listener: Listener | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[Need, ...]:
        """The async twin of ``ContractTransport.fulfil``: fetch ``needs`` through the same loop
        as every response's; return the needs still outstanding."""
        rounds = self._contract.rounds(tuple(needs), template(episode, listener, headers))
        return await self._run(rounds)

    async def _run(self, steps: Exchange[T]) -> T:
        return await adrive(steps, self._perform, THROWN)

    async def _perform(self, effect: Effect) -> Any:
        """Carry out one effect of the steps on the event loop (the memory's async calls)."""
        if isinstance(effect, MemoryCall):
            return await getattr(self.memory, effect.verb)(*effect.args, **effect.kwargs)
        if isinstance(effect, Send):
            return await self.wrapped.handle_async_request(effect.request)
        if isinstance(effect, ReadBody):
            return await self._contract.astream(effect.response, effect.body, effect.deadline)
        response = effect.response
        try:
            if not response.is_stream_consumed:
                async for chunk in response.aiter_raw():
                    if not effect.body.feed(chunk) or overdue(effect.body, effect.deadline):
                        break
        finally:
            await response.aclose()
        return None

    async def aclose(self) -> None:
        await self.watches.aclose()
        await self.wrapped.aclose()


def contract_client(
    memory: FixMemory | AsyncFixMemory,
    *,
    transport: httpx.BaseTransport | None = None,
    origin_of: Callable[[httpx.URL], str] = default_origin,
    conditional: bool = True,
    listener: Callable[[MemoryEvent], None] | None = None,
    watch: bool | WatchOptions = False,
    **client_kwargs: Any,
) -> httpx.Client:
    """An ``httpx.Client`` whose responses feed ``memory``; ``client_kwargs`` go to the client.

    With a ``base_url``, entering the client (``with``) confirms its origin first: one
    conditional read of what changed since the memory's stored position, so no fix the server
    moved on from while the agent was away is served (``ContractTransport.confirm``).
    """
    wrapped = ContractTransport(
        memory,
        transport,
        origin_of=origin_of,
        conditional=conditional,
        listener=listener,
        **_opening_of(origin_of, client_kwargs),
        watch=watch,
    )
    return httpx.Client(transport=wrapped, **client_kwargs)


def async_contract_client(
    memory: FixMemory | AsyncFixMemory,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    origin_of: Callable[[httpx.URL], str] = default_origin,
    conditional: bool = True,
    listener: Callable[[MemoryEvent], None] | None = None,
    watch: bool | WatchOptions = False,
    **client_kwargs: Any,
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` whose responses feed ``memory``; ``client_kwargs`` go to it.

    With a ``base_url``, entering the client (``async with``) confirms its origin first, as
    ``contract_client`` does.
    """
    wrapped = AsyncContractTransport(
        memory,
        transport,
        origin_of=origin_of,
        conditional=conditional,
        listener=listener,
        **_opening_of(origin_of, client_kwargs),
        watch=watch,
    )
    return httpx.AsyncClient(transport=wrapped, **client_kwargs)


@dataclass(frozen=True, slots=True)
class _Opening:
    """The origins a transport confirms when it is entered, and the credentials it reads with."""

    origins: tuple[str, ...]
    headers: Mapping[str, str] | None


def _opening_of(
    origin_of: Callable[[httpx.URL], str], client_kwargs: Mapping[str, Any]
) -> dict[str, Any]:
    """``confirm`` and ``confirm_headers`` for a client built with ``client_kwargs``."""
    base_url = client_kwargs.get("base_url")
    if not base_url:
        return {}
    given = httpx.Headers(client_kwargs.get("headers"))
    forwarded = {name: given[name] for name in FORWARDED_HEADERS if name in given}
    return {"confirm": (origin_of(httpx.URL(base_url)),), "confirm_headers": forwarded or None}
