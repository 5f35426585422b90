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

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import httpx

from ..protocol.headers import (
    CONTRACT_SIGN,
    CONTRACT_SIGNATURE,
    CONTRACT_SINCE,
    is_json_media_type,
    position_headers,
)
from ..protocol.wirecost import wire_cost
from .bounded import AsyncReplay, BoundedBody, Replay, asettle, parse_json, settle
from .discovery import DEFERRED, ContractLocations
from .events import FetchChanges, MemoryEvent, MemoryFailed, Need, Observation
from .extensions import EPISODE_EXTENSION as EPISODE_EXTENSION
from .extensions import INJECTED_EXTENSION as INJECTED_EXTENSION
from .extensions import LISTENER_EXTENSION as LISTENER_EXTENSION
from .extensions import OPERATION_EXTENSION as OPERATION_EXTENSION
from .extensions import REFUSED_EXTENSION as REFUSED_EXTENSION
from .extensions import WIRE_COST_EXTENSION as WIRE_COST_EXTENSION
from .extensions import Listener as Listener
from .extensions import default_origin as default_origin
from .extensions import describe, episode_of, injected_of, request_body, template, timeout_of
from .extensions import operation_of as operation_of
from .memory import AsyncFixMemory, FixMemory
from .needs import need_loop
from .published import PublishedPatchable
from .stores import StoreError
from .values import Answer, Observed, Position
from .watch import Watches, WatchOptions, watch_options

_FORWARDED_HEADERS = ("authorization",)
logger = logging.getLogger("invalidation_contracts.client")


class _Contract:
    """What the sync and async transports share: preparing requests and reading responses."""

    def __init__(
        self,
        memory: FixMemory | AsyncFixMemory,
        origin_of: Callable[[httpx.URL], str],
        conditional: bool,
        listener: Listener | None,
    ) -> None:
        self.memory = FixMemory.over(memory)
        self.origin_of = origin_of
        self.conditional = conditional
        self.listener = listener
        self.locations = ContractLocations()
        self.published = PublishedPatchable(self.memory)

    def sign(self, request: httpx.Request) -> str:
        origin = self.origin_of(request.url)
        if self.memory.trust.requests_signatures and CONTRACT_SIGN not in request.headers:
            request.headers[CONTRACT_SIGN] = "1"
        return origin

    def wants_position(self, request: httpx.Request) -> bool:
        return self.conditional and CONTRACT_SINCE not in request.headers

    @staticmethod
    def position(request: httpx.Request, position: Position) -> int | None:
        """Send the memory's ``position`` with ``request``; returns the seq sent."""
        request.headers.update(position_headers(position.seq, position.epoch))
        return position.seq

    def readable(self, response: httpx.Response) -> bool:
        """Whether the memory reads this response: JSON, and not announced over the body cap."""
        length = _content_length(response)
        return is_json(response) and (length is None or length <= self.memory.limits.max_body_bytes)

    def body(self, response: httpx.Response, bound: str) -> BoundedBody:
        """An empty bounded reading of ``response``'s body (one already read: of its content).

        A need's answer (``max_feed_bytes``) is read by the memory alone: no raw chunk is kept
        for a replay, so an encoded feed costs its decoded bytes only."""
        limits = self.memory.limits
        agent = bound == "max_body_bytes"
        cap = limits.max_body_bytes if agent else limits.max_feed_bytes
        if not response.is_stream_consumed:
            return BoundedBody.of(response.headers, cap, limits, bound, replay=agent)
        body = BoundedBody([], cap, limits.max_decoding_ratio, bound)
        body.feed(response.content)
        return body

    def read(self, response: httpx.Response) -> BoundedBody:
        """Read a body for the memory, decoding it as it streams and stopping at the first bound
        broken (decoded size, decoding ratio); past a bound, leave the rest to the agent.

        The agent gets the server's bytes unchanged: the raw chunks read so far are replayed
        ahead of the rest; a body within the bounds is read for it (``response.content``).
        """
        body = self.body(response, "max_body_bytes")
        if response.is_stream_consumed:
            return body
        rest = iter(cast(httpx.SyncByteStream, response.stream))
        for chunk in rest:
            if not body.feed(chunk):
                response.stream = Replay(body.raw, rest, response.stream)
                return body
        settle(response, body)
        if body.finish() is not None:
            response.read()
        return body

    async def aread(self, response: httpx.Response) -> BoundedBody:
        body = self.body(response, "max_body_bytes")
        if response.is_stream_consumed:
            return body
        rest = aiter(cast(httpx.AsyncByteStream, response.stream))
        async for chunk in rest:
            if not body.feed(chunk):
                response.stream = AsyncReplay(body.raw, rest, response.stream)
                return body
        await asettle(response, body)
        if body.finish() is not None:
            await response.aread()
        return body

    def observation(
        self,
        request: httpx.Request,
        response: httpx.Response,
        sent: int | None,
        read: BoundedBody | None,
    ) -> Observed:
        """What ``observe`` is given of one response (``read``: its body, as read)."""
        self.locations.learn(self.origin_of(request.url), request.url, response.headers)
        self.published.learn(self.origin_of(request.url), response.headers)
        parsed, refused, size = None, None, _content_length(response)
        if read is not None:
            size, content = read.size, read.finish()
            refused = None if read.over_size() else read.refusal
            if content is not None:
                parsed, refused = parse_json(content, self.memory.limits.max_json_depth)
        if refused is not None:
            response.extensions[REFUSED_EXTENSION] = refused
        elif read is not None and read.over_size():
            response.extensions[REFUSED_EXTENSION] = read.refusal
        cost = wire_cost(parsed) if isinstance(parsed, dict) else None
        if cost is not None:
            response.extensions[WIRE_COST_EXTENSION] = cost
        return Observed(
            request_body(request),
            response.status_code,
            parsed if isinstance(parsed, dict) else {},
            injected=injected_of(request),
            delta_since=_echo(response, sent),
            response_bytes=size,
            contract_bytes=cost.contract if cost is not None else None,
            response_id=response.headers.get("x-request-id"),
            signature=response.headers.get(CONTRACT_SIGNATURE),
            refused=refused,
        )

    def need_request(
        self, need: Need, template: httpx.Request, position: Position
    ) -> httpx.Request:
        """The fetch of ``need``; ``position`` (the memory's) lets a worker behind the position
        the memory knows catch up first (SPEC §8.2, 3.)."""
        headers = {"accept": "application/json", **position_headers(position.seq, position.epoch)}
        if self.memory.trust.requests_signatures:
            headers[CONTRACT_SIGN] = "1"
        headers.update(
            {
                name: template.headers[name]
                for name in _FORWARDED_HEADERS
                if name in template.headers
            }
        )
        params = None
        if isinstance(need, FetchChanges):
            params = {"since": str(need.since)}
            if need.epoch is not None:
                params["epoch"] = need.epoch
        url = self.locations.url(need.origin, need.path)
        return httpx.Request(
            "GET", url, params=params, headers=headers, extensions=timeout_of(template)
        )

    def answer(self, response: httpx.Response, read: BoundedBody) -> Answer:
        """A need's response as the memory's ``Answer``, as read (bounded)."""
        body, content = None, read.finish()
        refused = None if read.over_size() else read.refusal
        if content is not None and is_json(response):
            body, refused = parse_json(content, self.memory.limits.max_json_depth)
        return Answer(
            response.status_code,
            body,
            signature=response.headers.get(CONTRACT_SIGNATURE),
            body_bytes=read.size,
            refused=refused,
        )

    @staticmethod
    def failed(origin: str, request: httpx.Request, exc: StoreError) -> Observation:
        """A memory call that failed (disk full, store locked): an event and a warning; the
        agent still gets the server's answer, and nothing of it was learned."""
        logger.warning("%s: the fix memory failed (%s); nothing was learned", origin, exc)
        event = MemoryFailed(origin=origin, episode=episode_of(request), detail=str(exc))
        return Observation((event,))

    def emit(self, obs: Observation, request: httpx.Request) -> None:
        """Hand each event to the transport's listener, then to the request's own."""
        mine = request.extensions.get(LISTENER_EXTENSION)
        for listener in (self.listener, mine):
            if callable(listener):
                for event in obs.events:
                    listener(event)


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
        self._contract = _Contract(memory, origin_of, conditional, listener)
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

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        contract = self._contract
        origin = contract.sign(request)
        sent = None
        failed: Observation | None = None
        if contract.wants_position(request):
            try:
                sent = contract.position(request, self.memory.position(origin))
            except StoreError as exc:
                failed = contract.failed(origin, request, exc)
        response = self.wrapped.handle_request(request)
        read = contract.read(response) if contract.readable(response) else None
        observed = contract.observation(request, response, sent, read)
        try:
            obs = self.memory.observe(
                origin, observed, operation=operation_of(request), episode=episode_of(request)
            )
        except StoreError as exc:
            obs = contract.failed(origin, request, exc)
        if failed is not None:
            contract.emit(failed, request)
        contract.emit(obs, request)
        self._rounds(obs.needs, request)
        self.watches.ensure(origin, request)
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
        return self._rounds(tuple(needs), template(episode, listener, headers))

    def _rounds(self, needs: tuple[Need, ...], template: httpx.Request) -> tuple[Need, ...]:
        loop = need_loop(needs)
        try:
            need = next(loop)
            while True:
                need = loop.send(self._fulfil(need, template))
        except StopIteration as done:
            outstanding: tuple[Need, ...] = done.value
            return outstanding

    def _fulfil(self, need: Need, template: httpx.Request) -> tuple[Need, ...] | None:
        try:
            return self._fetch(need, template)
        except StoreError as exc:  # the need stays outstanding
            self._contract.emit(self._contract.failed(need.origin, template, exc), template)
            return None

    def _fetch(self, need: Need, template: httpx.Request) -> tuple[Need, ...] | None:
        episode = episode_of(template)
        position = self.memory.position(need.origin)
        try:
            fetch = self._contract.need_request(need, template, position)
            response = self.wrapped.handle_request(fetch)
            read = self._contract.body(response, "max_feed_bytes")
            try:
                for chunk in () if response.is_stream_consumed else response.iter_raw():
                    if not read.feed(chunk):
                        break
            finally:
                response.close()
        except httpx.TransportError as exc:
            obs = self.memory.fetch_failed(need, describe(exc), episode=episode)
            self._contract.emit(obs, template)
            return None
        if self._contract.locations.deferred(need.origin, fetch.url, response):
            obs = self.memory.fetch_failed(need, DEFERRED, episode=episode)
            self._contract.emit(obs, template)
            return None
        obs = self.memory.answer(need, self._contract.answer(response, read), episode=episode)
        self._contract.emit(obs, template)
        return obs.needs

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
        self._contract = _Contract(memory, origin_of, conditional, listener)
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

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        contract = self._contract
        origin = contract.sign(request)
        sent = None
        failed: Observation | None = None
        if contract.wants_position(request):
            try:
                sent = contract.position(request, await self.memory.position(origin))
            except StoreError as exc:
                failed = contract.failed(origin, request, exc)
        response = await self.wrapped.handle_async_request(request)
        read = await contract.aread(response) if contract.readable(response) else None
        observed = contract.observation(request, response, sent, read)
        try:
            obs = await self.memory.observe(
                origin, observed, operation=operation_of(request), episode=episode_of(request)
            )
        except StoreError as exc:
            obs = contract.failed(origin, request, exc)
        if failed is not None:
            contract.emit(failed, request)
        contract.emit(obs, request)
        await self._rounds(obs.needs, request)
        self.watches.ensure(origin, request, asynchronous=True)
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
        return await self._rounds(tuple(needs), template(episode, listener, headers))

    async def _rounds(self, needs: tuple[Need, ...], template: httpx.Request) -> tuple[Need, ...]:
        loop = need_loop(needs)
        try:
            need = next(loop)
            while True:
                need = loop.send(await self._fulfil(need, template))
        except StopIteration as done:
            outstanding: tuple[Need, ...] = done.value
            return outstanding

    async def _fulfil(self, need: Need, template: httpx.Request) -> tuple[Need, ...] | None:
        try:
            return await self._fetch(need, template)
        except StoreError as exc:  # the need stays outstanding
            self._contract.emit(self._contract.failed(need.origin, template, exc), template)
            return None

    async def _fetch(self, need: Need, template: httpx.Request) -> tuple[Need, ...] | None:
        episode = episode_of(template)
        position = await self.memory.position(need.origin)
        try:
            fetch = self._contract.need_request(need, template, position)
            response = await self.wrapped.handle_async_request(fetch)
            read = self._contract.body(response, "max_feed_bytes")
            try:
                if not response.is_stream_consumed:
                    async for chunk in response.aiter_raw():
                        if not read.feed(chunk):
                            break
            finally:
                await response.aclose()
        except httpx.TransportError as exc:
            obs = await self.memory.fetch_failed(need, describe(exc), episode=episode)
            self._contract.emit(obs, template)
            return None
        if self._contract.locations.deferred(need.origin, fetch.url, response):
            obs = await self.memory.fetch_failed(need, DEFERRED, episode=episode)
            self._contract.emit(obs, template)
            return None
        obs = await self.memory.answer(need, self._contract.answer(response, read), episode=episode)
        self._contract.emit(obs, template)
        return obs.needs

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
    forwarded = {name: given[name] for name in _FORWARDED_HEADERS if name in given}
    return {"confirm": (origin_of(httpx.URL(base_url)),), "confirm_headers": forwarded or None}


def is_json(response: httpx.Response) -> bool:
    """Whether a response is JSON (``application/json`` or ``+json``): only those are read."""
    return is_json_media_type(response.headers.get("content-type"))


def _content_length(response: httpx.Response) -> int | None:
    value = response.headers.get("content-length", "")
    return int(value) if value.isdigit() and value.isascii() and len(value) < 20 else None


def _echo(response: httpx.Response, sent: int | None) -> int | None:
    """The ``Contract-Since`` the server echoed (its answer is then a delta), else None."""
    echoed = response.headers.get(CONTRACT_SINCE)
    if echoed is None:
        return None
    try:
        return int(echoed)
    except ValueError:
        return sent if sent is not None else 0
