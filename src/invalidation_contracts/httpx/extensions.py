"""What a request tells the httpx transports: its extensions, its origin, its operation, its body.

The request extensions an agent sets (the episode, the injected entries, the operation, a
listener) and the response extensions the transports leave (the wire cost, a refusal), with the
readers of each; the package (``invalidation_contracts.httpx``) exports the names an agent uses.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from ..client.events import MemoryEvent

#: Request extension: the episode the request belongs to (an int).
EPISODE_EXTENSION = "invalidation_contracts.episode"
#: Request extension: ids of the memory entries injected into this request.
INJECTED_EXTENSION = "invalidation_contracts.injected"
#: Request extension: the operation the request performs (a route template or a tool name).
OPERATION_EXTENSION = "invalidation_contracts.operation"
#: Request extension: a callable given every memory event this request causes (its response's
#: and those of the needs fetched for it), after the transport's own listener.
LISTENER_EXTENSION = "invalidation_contracts.listener"
#: Response extension: the ``WireCost`` of a JSON object body, as the memory was given it.
WIRE_COST_EXTENSION = "invalidation_contracts.wire_cost"
#: Response extension: the ``Refusal`` (a ``Limits`` bound) that stopped the memory reading the
#: body; the agent still gets the body as the server sent it.
REFUSED_EXTENSION = "invalidation_contracts.refused"

Listener = Callable[[MemoryEvent], None]


def default_origin(url: httpx.URL) -> str:
    """``scheme://host[:port]`` of a URL: the origin the memory keys entries by."""
    host = f"[{url.host}]" if ":" in url.host else url.host
    port = f":{url.port}" if url.port is not None else ""
    return f"{url.scheme}://{host}{port}"


def operation_of(request: httpx.Request) -> str:
    """The operation a request performs: its ``OPERATION_EXTENSION``, else ``METHOD path``.

    The path is the URL's, without the query: ``/v1/orders/7`` and ``/v1/orders/8`` are two
    operations unless the caller names the route template they share.
    """
    named = request.extensions.get(OPERATION_EXTENSION)
    if isinstance(named, str) and named:
        return named
    return f"{request.method} {request.url.path}"


def request_body(request: httpx.Request) -> dict[str, Any] | None:
    """The JSON object the request sent; None when that is unknown (not read, or not JSON)."""
    try:
        content = request.content
    except httpx.RequestNotRead:
        return None
    try:
        body = json.loads(content) if content else None
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def episode_of(request: httpx.Request) -> int | None:
    value = request.extensions.get(EPISODE_EXTENSION)
    return value if isinstance(value, int) else None


def injected_of(request: httpx.Request) -> tuple[str, ...]:
    value = request.extensions.get(INJECTED_EXTENSION) or ()
    return tuple(str(v) for v in value)


def template(
    episode: int | None, listener: Listener | None, headers: Mapping[str, str] | None
) -> httpx.Request:
    """The request a ``fulfil`` call's need fetches take their episode, listener and credentials
    from (it is never sent)."""
    extensions: dict[str, Any] = {LISTENER_EXTENSION: listener}
    if episode is not None:
        extensions[EPISODE_EXTENSION] = episode
    return httpx.Request("GET", "http://needs.invalid/", headers=headers, extensions=extensions)


def timeout_of(template: httpx.Request) -> dict[str, Any]:
    """The ``timeout`` extension of ``template``, for the requests made on its behalf."""
    timeout = template.extensions.get("timeout")
    return {"timeout": timeout} if timeout is not None else {}


def describe(exc: BaseException) -> str:
    """An exception as one line: its type, and its message when it has one."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
