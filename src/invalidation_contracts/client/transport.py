"""httpx integration: a transport that feeds every response of a wrapped client to a fix memory.

An existing agent gains the contract by wrapping its client's transport::

    memory = FixMemory("row", store="memory.db")
    client = httpx.Client(transport=ContractTransport(memory), base_url="https://api.example")
    fixes = memory.relevant("https://api.example", draft)
    client.post("/v1/subscriptions", json=draft,
                extensions={INJECTED_EXTENSION: [f.id for f in fixes], EPISODE_EXTENSION: 7})

The transport observes each response, fulfils the memory's needs (``/contract/changes``,
``/contract/rules``) through the wrapped transport, and sends ``Contract-Since`` so the server may
answer with a delta of ``table_versions``. Only JSON responses are read (others, streams included,
pass through untouched). Failures of those contract fetches never fail the
agent's request: a 410 triggers a resync, another answer falls back conservatively, and a network
error leaves the need outstanding for the next response.

A caller that needs every event one request caused (the harness's oracle does) puts a callable in
the request's ``LISTENER_EXTENSION``; needs the memory returns outside a response (from
``begin_episode``) go through ``fulfil``, the same loop. Each JSON response's ``WireCost`` is left
in ``response.extensions[WIRE_COST_EXTENSION]``, measured once for the memory and the caller.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterable, Mapping
from typing import Any

import httpx

from ..protocol.signing import CONTRACT_SIGN, CONTRACT_SIGNATURE
from ..protocol.wirecost import wire_cost
from .events import FetchChanges, MemoryEvent, Need, Observation
from .memory import FixMemory

CONTRACT_SINCE = "Contract-Since"
#: Request extension: the episode the request belongs to (an int).
EPISODE_EXTENSION = "invalidation_contracts.episode"
#: Request extension: ids of the memory entries injected into this request.
INJECTED_EXTENSION = "invalidation_contracts.injected"
#: Request extension: a callable given every memory event this request causes (its response's
#: and those of the needs fetched for it), after the transport's own listener.
LISTENER_EXTENSION = "invalidation_contracts.listener"
#: Response extension: the ``WireCost`` of a JSON object body, as the memory was given it.
WIRE_COST_EXTENSION = "invalidation_contracts.wire_cost"
#: How many rounds of needs one response may trigger (a need can lead to another).
MAX_NEED_ROUNDS = 3

Listener = Callable[[MemoryEvent], None]
_FORWARDED_HEADERS = ("authorization",)


def default_origin(url: httpx.URL) -> str:
    """``scheme://host[:port]`` of a URL: the origin the memory keys entries by."""
    host = f"[{url.host}]" if ":" in url.host else url.host
    port = f":{url.port}" if url.port is not None else ""
    return f"{url.scheme}://{host}{port}"


class _Contract:
    """What the sync and async transports share: preparing requests and reading responses."""

    def __init__(
        self,
        memory: FixMemory,
        origin_of: Callable[[httpx.URL], str],
        conditional: bool,
        listener: Listener | None,
    ) -> None:
        self.memory = memory
        self.origin_of = origin_of
        self.conditional = conditional
        self.listener = listener

    def prepare(self, request: httpx.Request) -> tuple[str, int | None]:
        origin = self.origin_of(request.url)
        if self.memory.trust.requests_signatures and CONTRACT_SIGN not in request.headers:
            request.headers[CONTRACT_SIGN] = "1"
        sent = None
        if self.conditional and CONTRACT_SINCE not in request.headers:
            headers = self.memory.conditional_headers(origin)
            request.headers.update(headers)
            sent = int(headers[CONTRACT_SINCE]) if headers else None
        return origin, sent

    def observe(
        self, request: httpx.Request, response: httpx.Response, origin: str, sent: int | None
    ) -> Observation:
        body = _json_body(response)
        size = len(response.content) if is_json(response) else _content_length(response)
        cost = wire_cost(body) if isinstance(body, dict) else None
        if cost is not None:
            response.extensions[WIRE_COST_EXTENSION] = cost
        obs = self.memory.observe(
            origin,
            _request_body(request),
            response.status_code,
            body if isinstance(body, dict) else {},
            episode=_episode(request),
            injected=_injected(request),
            delta_since=_echo(response, sent),
            response_bytes=size,
            contract_bytes=cost.contract if cost is not None else None,
            response_id=response.headers.get("x-request-id"),
            signature=response.headers.get(CONTRACT_SIGNATURE),
        )
        self.emit(obs, request)
        return obs

    def need_request(self, need: Need, template: httpx.Request) -> httpx.Request:
        headers = {"accept": "application/json"}
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
        url = httpx.URL(need.origin.rstrip("/") + need.path)
        return httpx.Request(
            "GET", url, params=params, headers=headers, extensions=_timeout(template)
        )

    def need_answered(
        self, need: Need, response: httpx.Response, template: httpx.Request
    ) -> Observation:
        obs = self.memory.answer(
            need,
            response.status_code,
            _json_body(response),
            episode=_episode(template),
            signature=response.headers.get(CONTRACT_SIGNATURE),
        )
        self.emit(obs, template)
        return obs

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
        memory: FixMemory,
        transport: httpx.BaseTransport | None = None,
        *,
        origin_of: Callable[[httpx.URL], str] = default_origin,
        conditional: bool = True,
        listener: Callable[[MemoryEvent], None] | None = None,
    ) -> None:
        self.memory = memory
        self.wrapped = transport if transport is not None else httpx.HTTPTransport()
        self._contract = _Contract(memory, origin_of, conditional, listener)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        origin, sent = self._contract.prepare(request)
        response = self.wrapped.handle_request(request)
        if is_json(response):
            response.read()
        self._rounds(self._contract.observe(request, response, origin, sent).needs, request)
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
        return self._rounds(tuple(needs), _template(episode, listener, headers))

    def _rounds(self, needs: tuple[Need, ...], template: httpx.Request) -> tuple[Need, ...]:
        loop = _need_loop(needs)
        try:
            need = next(loop)
            while True:
                need = loop.send(self._fulfil(need, template))
        except StopIteration as done:
            outstanding: tuple[Need, ...] = done.value
            return outstanding

    def _fulfil(self, need: Need, template: httpx.Request) -> tuple[Need, ...] | None:
        try:
            response = self.wrapped.handle_request(self._contract.need_request(need, template))
            try:
                response.read()
            finally:
                response.close()
        except httpx.TransportError:
            return None
        return self._contract.need_answered(need, response, template).needs

    def close(self) -> None:
        self.wrapped.close()


class AsyncContractTransport(httpx.AsyncBaseTransport):
    """The async twin of ``ContractTransport``."""

    def __init__(
        self,
        memory: FixMemory,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        origin_of: Callable[[httpx.URL], str] = default_origin,
        conditional: bool = True,
        listener: Callable[[MemoryEvent], None] | None = None,
    ) -> None:
        self.memory = memory
        self.wrapped = transport if transport is not None else httpx.AsyncHTTPTransport()
        self._contract = _Contract(memory, origin_of, conditional, listener)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        origin, sent = self._contract.prepare(request)
        response = await self.wrapped.handle_async_request(request)
        if is_json(response):
            await response.aread()
        await self._rounds(self._contract.observe(request, response, origin, sent).needs, request)
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
        return await self._rounds(tuple(needs), _template(episode, listener, headers))

    async def _rounds(self, needs: tuple[Need, ...], template: httpx.Request) -> tuple[Need, ...]:
        loop = _need_loop(needs)
        try:
            need = next(loop)
            while True:
                need = loop.send(await self._fulfil(need, template))
        except StopIteration as done:
            outstanding: tuple[Need, ...] = done.value
            return outstanding

    async def _fulfil(self, need: Need, template: httpx.Request) -> tuple[Need, ...] | None:
        try:
            response = await self.wrapped.handle_async_request(
                self._contract.need_request(need, template)
            )
            try:
                await response.aread()
            finally:
                await response.aclose()
        except httpx.TransportError:
            return None
        return self._contract.need_answered(need, response, template).needs

    async def aclose(self) -> None:
        await self.wrapped.aclose()


def contract_client(
    memory: FixMemory,
    *,
    transport: httpx.BaseTransport | None = None,
    origin_of: Callable[[httpx.URL], str] = default_origin,
    conditional: bool = True,
    listener: Callable[[MemoryEvent], None] | None = None,
    **client_kwargs: Any,
) -> httpx.Client:
    """An ``httpx.Client`` whose responses feed ``memory``; ``client_kwargs`` go to the client."""
    wrapped = ContractTransport(
        memory, transport, origin_of=origin_of, conditional=conditional, listener=listener
    )
    return httpx.Client(transport=wrapped, **client_kwargs)


def async_contract_client(
    memory: FixMemory,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    origin_of: Callable[[httpx.URL], str] = default_origin,
    conditional: bool = True,
    listener: Callable[[MemoryEvent], None] | None = None,
    **client_kwargs: Any,
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` whose responses feed ``memory``; ``client_kwargs`` go to it."""
    wrapped = AsyncContractTransport(
        memory, transport, origin_of=origin_of, conditional=conditional, listener=listener
    )
    return httpx.AsyncClient(transport=wrapped, **client_kwargs)


def is_json(response: httpx.Response) -> bool:
    """Whether a response is JSON (``application/json`` or ``+json``): only those are read."""
    kind: str = response.headers.get("content-type", "").split(";")[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json")


def _content_length(response: httpx.Response) -> int | None:
    value = response.headers.get("content-length", "")
    return int(value) if value.isdigit() else None


def _json_body(response: httpx.Response) -> Any:
    if not is_json(response):
        return None
    try:
        return json.loads(response.content)
    except ValueError:
        return None


def _request_body(request: httpx.Request) -> dict[str, Any]:
    try:
        content = request.content
    except httpx.RequestNotRead:
        return {}
    try:
        body = json.loads(content) if content else {}
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _episode(request: httpx.Request) -> int | None:
    value = request.extensions.get(EPISODE_EXTENSION)
    return value if isinstance(value, int) else None


def _injected(request: httpx.Request) -> tuple[str, ...]:
    value = request.extensions.get(INJECTED_EXTENSION) or ()
    return tuple(str(v) for v in value)


def _echo(response: httpx.Response, sent: int | None) -> int | None:
    """The ``Contract-Since`` the server echoed (its answer is then a delta), else None."""
    echoed = response.headers.get(CONTRACT_SINCE)
    if echoed is None:
        return None
    try:
        return int(echoed)
    except ValueError:
        return sent if sent is not None else 0


def _timeout(template: httpx.Request) -> dict[str, Any]:
    timeout = template.extensions.get("timeout")
    return {"timeout": timeout} if timeout is not None else {}


def _need_loop(
    needs: tuple[Need, ...],
) -> Generator[Need, tuple[Need, ...] | None, tuple[Need, ...]]:
    """The need loop both transports drive, sans-IO: yields each need to fetch and is sent what
    its answer asked for next (None: it could not be fetched); returns the needs outstanding."""
    outstanding: list[Need] = []
    for _ in range(MAX_NEED_ROUNDS):
        follow: list[Need] = []
        for need in _unique(needs):
            answered = yield need
            if answered is None:
                outstanding.append(need)
            else:
                follow.extend(answered)
        needs = tuple(follow)
    return tuple(_unique([*outstanding, *needs]))


def _template(
    episode: int | None, listener: Listener | None, headers: Mapping[str, str] | None
) -> httpx.Request:
    """The request a ``fulfil`` call's need fetches take their episode, listener and credentials
    from (it is never sent)."""
    extensions: dict[str, Any] = {LISTENER_EXTENSION: listener}
    if episode is not None:
        extensions[EPISODE_EXTENSION] = episode
    return httpx.Request("GET", "http://needs.invalid/", headers=headers, extensions=extensions)


def _unique(needs: Iterable[Need]) -> list[Need]:
    return list(dict.fromkeys(needs))
