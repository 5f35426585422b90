"""The ``Link`` to the contract's location on every contract response (``protocol.links``).

Where the contract routes live depends on how the app includes them (``prefix=`` on the router
or on ``include_router``, a mounted sub-app, a proxy's ``root_path``). The app's routing table
says it: the service's ``/contract/versions`` route, wherever it ended up, is found once per app
and cached. An app that does not include the contract router advertises nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response

from ...protocol.links import link_header
from .routing import effective_routes


class Discoverable(Protocol):
    """What finding the contract's location needs: the per-app caches it fills."""

    @property
    def contract_bases(self) -> dict[int, str | None]: ...

    @property
    def contract_links(self) -> dict[tuple[int, str], bytes | None]: ...


_VERSIONS = "/versions"


def contract_base(service: Discoverable, request: Request) -> str | None:
    """The absolute path the contract routes of ``service`` hang from in this request's app."""
    app = request.scope.get("app")
    cache: dict[int, str | None] = service.contract_bases
    key = id(app)
    if key not in cache:
        found = _find(getattr(app, "routes", ()), service)
        cache[key] = found
    base = cache[key]
    return None if base is None else str(request.scope.get("root_path", "")) + base


def add_link(service: Discoverable, request: Request, response: Response) -> Response:
    """``response`` with the contract's ``Link`` (when the app serves the contract routes)."""
    scope = request.scope
    key = (id(scope.get("app")), str(scope.get("root_path", "")))
    links: dict[tuple[int, str], bytes | None] = service.contract_links
    try:
        value = links[key]
    except KeyError:
        # What ``response.headers.append("Link", ...)`` appends, encoded once per app and root.
        base = contract_base(service, request)
        value = None if base is None else _encoded(base)
        if len(links) < _ENCODED_BOUND:
            links[key] = value
    if value is not None:
        response.raw_headers.append((b"link", value))
    return response


def _encoded(base: str) -> bytes:
    value = _ENCODED.get(base)
    if value is None:
        value = link_header(base).encode("latin-1")
        if len(_ENCODED) < _ENCODED_BOUND:
            _ENCODED[base] = value
    return value


_ENCODED: dict[str, bytes] = {}
_ENCODED_BOUND = 256


def _find(routes: Iterable[Any], service: Discoverable) -> str | None:
    for path, route in effective_routes(routes):
        if (
            getattr(route, "service", None) is service
            and path.endswith("/contract" + _VERSIONS)
            and "GET" in (getattr(route, "methods", None) or ())
        ):
            return path[: -len(_VERSIONS)]
    return None
