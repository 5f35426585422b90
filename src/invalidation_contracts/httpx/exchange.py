"""One exchange of the httpx transports as steps: what ``ContractTransport`` and
``AsyncContractTransport`` share, written once.

An agent's request (``ContractExchange.exchange``) and each need it leaves (``rounds``) are
generators that yield effects — a memory call, a send through the wrapped transport, a body read —
and are sent each effect's result, or have its failure thrown in. The sync transport performs the
effects blocking and the async one awaits them (``steps.drive``, ``steps.adrive``), as the fix
memory's own calls are run; everything else (signing, position headers, bounded bodies, the
``Observed`` and ``Answer`` built from a response, the events handed to listeners) is here once.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import httpx

from ..client.events import FetchChanges, MemoryFailed, Need, Observation, ReadResource
from ..client.limits import Refusal, parse_json
from ..client.memory import AsyncFixMemory, FixMemory
from ..client.needs import need_loop
from ..client.published import PublishedPatchable
from ..client.shared.store import StoreError
from ..client.values import Answer, Observed, Position
from ..protocol.headers import (
    CONTRACT_SIGN,
    CONTRACT_SIGNATURE,
    CONTRACT_SINCE,
    is_json_media_type,
    position_headers,
)
from ..protocol.links import citations
from ..protocol.signing import Binding
from ..protocol.wirecost import wire_cost
from .bounded import AsyncReplay, BoundedBody, Replay, asettle, settle
from .discovery import DEFERRED, ContractLocations
from .extensions import (
    LISTENER_EXTENSION,
    REFUSED_EXTENSION,
    WIRE_COST_EXTENSION,
    Listener,
    describe,
    episode_of,
    injected_of,
    operation_of,
    request_body,
    timeout_of,
)

#: The request headers a need's fetch and a confirmation carry over from the agent's.
FORWARDED_HEADERS = ("authorization",)
logger = logging.getLogger("invalidation_contracts.client")
T = TypeVar("T")

#: The ``Limits`` field of the memory's reading deadline, as a ``Refusal`` names it.
DEADLINE = "max_read_seconds"
THROWN = (StoreError, httpx.TransportError)
"""The failures a step handles itself: thrown into the steps rather than out of the runner."""


@dataclass(frozen=True, slots=True)
class MemoryCall:
    """A memory call, ``verb(*args, **kwargs)``: blocking or awaited, as the transport is."""

    verb: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def __init__(self, verb: str, *args: Any, **kwargs: Any) -> None:
        object.__setattr__(self, "verb", verb)
        object.__setattr__(self, "args", args)
        object.__setattr__(self, "kwargs", kwargs)


@dataclass(frozen=True, slots=True)
class Send:
    """``request`` through the wrapped transport; its ``httpx.Response`` is sent back."""

    request: httpx.Request


@dataclass(frozen=True, slots=True)
class ReadBody:
    """An agent's response read into ``body`` for the memory, the rest left to the agent; the
    reading stops at ``deadline`` (``time.monotonic``)."""

    response: httpx.Response
    body: BoundedBody
    deadline: float = math.inf


@dataclass(frozen=True, slots=True)
class ReadAnswer:
    """A need's answer read into ``body`` up to its bound and ``deadline``; closed after."""

    response: httpx.Response
    body: BoundedBody
    deadline: float = math.inf


def overdue(body: BoundedBody, deadline: float) -> bool:
    """Past ``deadline``: ``body`` is refused (``max_read_seconds``) and reading stops."""
    if time.monotonic() <= deadline:
        return False
    body.refusal = Refusal(DEADLINE, int(time.monotonic() - deadline) + 1)
    return True


Effect = MemoryCall | Send | ReadBody | ReadAnswer
#: One exchange as steps: it yields effects, is sent each one's result, returns its own.
Exchange = Generator[Effect, Any, T]


class ContractExchange:
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

    @staticmethod
    def stream(response: httpx.Response, body: BoundedBody, deadline: float = math.inf) -> None:
        """Read ``response``'s stream into ``body``, decoding as it goes and stopping at the first
        bound broken (decoded size, decoding ratio); past a bound, leave the rest to the agent.

        The agent gets the server's bytes unchanged: the raw chunks read so far are replayed
        ahead of the rest; a body within the bounds is read for it (``response.content``).
        """
        rest = iter(cast(httpx.SyncByteStream, response.stream))
        for chunk in rest:
            if not body.feed(chunk) or overdue(body, deadline):
                response.stream = Replay(body.raw, rest, response.stream)
                return
        settle(response, body)
        if body.finish() is not None:
            response.read()

    @staticmethod
    async def astream(
        response: httpx.Response, body: BoundedBody, deadline: float = math.inf
    ) -> None:
        """``stream`` without blocking the event loop."""
        rest = aiter(cast(httpx.AsyncByteStream, response.stream))
        async for chunk in rest:
            if not body.feed(chunk) or overdue(body, deadline):
                response.stream = AsyncReplay(body.raw, rest, response.stream)
                return
        await asettle(response, body)
        if body.finish() is not None:
            await response.aread()

    def exchange(self, request: httpx.Request) -> Exchange[httpx.Response]:
        """One request of the agent's: the position sent, the response read and observed, and
        the needs it left fetched (``rounds``)."""
        origin = self.sign(request)
        deadline = time.monotonic() + self.memory.limits.max_read_seconds
        sent = None
        failed: Observation | None = None
        if self.wants_position(request):
            try:
                sent = self.position(request, (yield MemoryCall("position", origin)))
            except StoreError as exc:
                failed = self.failed(origin, request, exc)
        response: httpx.Response = yield Send(request)
        read = None
        if self.readable(response):
            read = self.body(response, "max_body_bytes")
            if not response.is_stream_consumed:
                yield ReadBody(response, read, deadline)
        observed = self.observation(request, response, sent, read)
        learned = self.locations.learn(origin, request.url, response.headers)
        if learned is not None:
            try:  # kept for the next process; a failing store only costs it a first 404
                yield MemoryCall("set_contract_location", origin, learned)
            except StoreError as exc:
                logger.warning("%s: contract location not kept: %s", origin, exc)
        try:
            obs = yield MemoryCall(
                "observe",
                origin,
                observed,
                operation=operation_of(request),
                episode=episode_of(request),
            )
        except StoreError as exc:
            obs = self.failed(origin, request, exc)
        if failed is not None:
            self.emit(failed, request)
        self.emit(obs, request)
        yield from self.rounds(obs.needs, request, deadline)
        return response

    def rounds(
        self, needs: tuple[Need, ...], template: httpx.Request, deadline: float | None = None
    ) -> Exchange[tuple[Need, ...]]:
        """Fetch ``needs`` and what their answers ask for next (``need_loop``), all by
        ``deadline`` (default: ``max_read_seconds`` from now); returns the needs still
        outstanding."""
        if deadline is None:
            deadline = time.monotonic() + self.memory.limits.max_read_seconds
        loop = need_loop(needs)
        try:
            need = next(loop)
            while True:
                need = loop.send((yield from self.fulfil(need, template, deadline)))
        except StopIteration as done:
            outstanding: tuple[Need, ...] = done.value
            return outstanding

    def fulfil(
        self, need: Need, template: httpx.Request, deadline: float = math.inf
    ) -> Exchange[tuple[Need, ...] | None]:
        """Fetch one need by ``deadline`` and feed its answer back; None leaves it
        outstanding."""
        episode = episode_of(template)
        try:
            position = yield MemoryCall("position", need.origin)
            if not self.locations.known(need.origin):  # a new process: where the memory kept it
                state = yield MemoryCall("state", need.origin)
                if state.contract_location is not None:
                    self.locations.restore(need.origin, state.contract_location)
            try:
                late = time.monotonic() > deadline
                if not late:
                    fetch = self.need_request(need, template, position)
                    response: httpx.Response = yield Send(fetch)
                    read = self.body(response, "max_feed_bytes")
                    yield ReadAnswer(response, read, deadline)
                    late = read.refusal is not None and read.refusal.bound == DEADLINE
                if late:
                    why = f"not fetched within {DEADLINE}={self.memory.limits.max_read_seconds}"
                    failed = yield MemoryCall("fetch_failed", need, why, episode=episode)
                    self.emit(failed, template)
                    return None
            except httpx.TransportError as exc:
                failed = yield MemoryCall("fetch_failed", need, describe(exc), episode=episode)
                self.emit(failed, template)
                return None
            if not isinstance(need, ReadResource) and self.locations.deferred(
                need.origin, fetch.url, response
            ):
                failed = yield MemoryCall("fetch_failed", need, DEFERRED, episode=episode)
                self.emit(failed, template)
                return None
            answer = self.answer(response, read)
            obs: Observation = yield MemoryCall("answer", need, answer, episode=episode)
        except StoreError as exc:  # the need stays outstanding
            self.emit(self.failed(need.origin, template, exc), template)
            return None
        self.emit(obs, template)
        return obs.needs

    def observation(
        self,
        request: httpx.Request,
        response: httpx.Response,
        sent: int | None,
        read: BoundedBody | None,
    ) -> Observed:
        """What ``observe`` is given of one response (``read``: its body, as read)."""
        self.published.learn(self.origin_of(request.url), response.headers)
        parsed, refused, size = None, None, _content_length(response)
        if read is not None:
            size, content = read.size, read.finish()
            refused = None if read.over_size() else read.refusal
            if content is not None:
                # A signed body is read whole: its statement covers every key it names.
                signed = CONTRACT_SIGNATURE in response.headers
                wide = None if signed else self.memory.limits.max_keys_per_entry
                parsed, refused = parse_json(content, self.memory.limits.max_json_depth, wide)
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
            cites=_cites(response),
            binding=Binding(f"{request.method} {request.url.path}", request.headers.get("host")),
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
            {name: template.headers[name] for name in FORWARDED_HEADERS if name in template.headers}
        )
        if isinstance(need, ReadResource):
            return self.resource_request(need, template)
        params = None
        if isinstance(need, FetchChanges):
            params = {"since": str(need.since)}
            if need.epoch is not None:
                params["epoch"] = need.epoch
        url = self.locations.url(need.origin, need.path)
        return httpx.Request(
            "GET", url, params=params, headers=headers, extensions=timeout_of(template)
        )

    def resource_request(self, need: ReadResource, template: httpx.Request) -> httpx.Request:
        """The read of a resource a fix cites, on the origin that cited it: conditional
        (``If-None-Match``) when the memory holds its validator."""
        headers = {"accept": "application/json"}
        headers.update(
            {name: template.headers[name] for name in FORWARDED_HEADERS if name in template.headers}
        )
        if need.etag is not None:
            headers["if-none-match"] = need.etag
        url = httpx.URL(need.origin).join(need.path)
        return httpx.Request("GET", url, headers=headers, extensions=timeout_of(template))

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
            etag=response.headers.get("etag"),
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


def is_json(response: httpx.Response) -> bool:
    """Whether a response is JSON (``application/json`` or ``+json``): only those are read."""
    return is_json_media_type(response.headers.get("content-type"))


def _cites(response: httpx.Response) -> dict[int, tuple[str, ...]]:
    """The resources a 422's suggestions cite (``Link``, ``protocol.links.citations``)."""
    return citations(response.headers.get_list("link")) if response.status_code == 422 else {}


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
