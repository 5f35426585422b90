"""Where an app's routes really live: every route with the full path it is served at.

FastAPI applies ``include_router(..., prefix=)`` either by copying each route with the prefix
in its path (older releases) or by keeping the router and its prefix aside (``original_router``
and ``include_context``, newer ones); Starlette mounts add their own path. A route object alone
does not know its full path, so the contract finds it here: the ``Link`` to the contract's
location (``discovery``), the domain route a retrofitted route implements (``retrofit``), and the
start-up check that every domain route has an endpoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from starlette.routing import Mount, compile_path


def effective_routes(routes: Iterable[Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(full path, route)`` for every route under ``routes``, included routers and mounts
    walked (bounded by the app's own structure)."""
    for route in routes:
        original = getattr(route, "original_router", None)
        if original is not None:
            context = getattr(route, "include_context", None)
            inner = str(getattr(context, "prefix", "") or "")
            yield from effective_routes(getattr(original, "routes", ()), prefix + inner)
        elif isinstance(route, Mount):
            yield from effective_routes(route.routes, prefix + route.path)
        else:
            yield prefix + str(getattr(route, "path", "")), route


def route_path(scope: Any) -> str:
    """The request's path within its app (without the ``root_path`` a mount or proxy adds)."""
    path = str(scope.get("path", ""))
    root = str(scope.get("root_path", ""))
    return path[len(root) :] if root and path.startswith(root) else path


def path_matches(template: str, path: str) -> bool:
    """Whether ``path`` is an instance of the route template ``template``."""
    if "{" not in template:
        return template == path
    regex, _, _ = compile_path(template)
    return regex.match(path) is not None
