"""Where an app's routes really live: every route with the full path it is served at.

FastAPI applies ``include_router(..., prefix=)`` either by copying each route with the prefix
in its path (older releases) or by keeping the router and its prefix aside (``original_router``
and ``include_context``, newer ones); Starlette mounts add their own path. A route object alone
does not know its full path, so the contract finds it here: the ``Link`` to the contract's
location (``discovery``), the domain route a retrofitted route implements (``retrofit``), and the
start-up check that every domain route has an endpoint.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator
from typing import Any

from fastapi import APIRouter
from starlette.routing import Match, Mount, Route, WebSocketRoute, compile_path
from starlette.types import Scope


def effective_routes(
    routes: Iterable[Any], prefix: str = "", *, mount_paths: bool = True
) -> Iterator[tuple[str, Any]]:
    """``(full path, route)`` for every route under ``routes``, included routers and mounts
    walked (bounded by the app's own structure). ``mount_paths=False``: a route under a mount
    gets its path within the mount, the path ``route_path`` gives its requests (a mount adds its
    path to the request's ``root_path``)."""
    for route in routes:
        original = getattr(route, "original_router", None)
        if original is not None:
            context = getattr(route, "include_context", None)
            inner = str(getattr(context, "prefix", "") or "")
            routes_in = getattr(original, "routes", ())
            yield from effective_routes(routes_in, prefix + inner, mount_paths=mount_paths)
        elif isinstance(route, Mount):
            within = prefix + route.path if mount_paths else ""
            yield from effective_routes(route.routes, within, mount_paths=mount_paths)
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
    return _template_regex(template).match(path) is not None


@functools.lru_cache(maxsize=1024)
def _template_regex(template: str) -> re.Pattern[str]:
    """A route template's regex, compiled once (templates come from the app's own routes)."""
    regex, _, _ = compile_path(template)
    return regex


class LiteralRouter(APIRouter):
    """An ``APIRouter`` whose routes all have literal paths, and which says so cheaply: a request
    whose path ends with none of them is not matched, without asking each route.

    Recent FastAPI keeps an included router as one entry of the app's routing table and asks it
    (``matches``) for every request that reaches it, which walks all its routes (several scope
    updates each). The contract's routers are included ahead of an app's own routes (the
    documented order), so without this every request to the app's own routes paid that walk
    (benchmarks/NOTES.md §9). A literal route matches only the path that ends with its own
    (whatever prefix it is included under), so the test is exact: it never says no where a route
    would say yes (PARTIAL included: a wrong method still gets its 405). Routes with parameters,
    mounts or other kinds turn the shortcut off. FastAPI releases that copy an included router's
    routes into the app never call this; their routes match as before.
    """

    _suffixes: tuple[int, int, tuple[str, ...] | None] = (0, -1, None)

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        suffixes = self._literal_suffixes()
        path = scope.get("path")
        if suffixes is not None and isinstance(path, str) and not path.endswith(suffixes):
            return Match.NONE, {}
        parent: Any = super()
        result: tuple[Match, Scope] = parent.matches(scope)
        return result

    def _literal_suffixes(self) -> tuple[str, ...] | None:
        """Every route's path, or None unless all of them are plain routes with literal paths;
        kept until the route list changes (the same list and length)."""
        routes = self.routes
        key, length, cached = self._suffixes
        if key == id(routes) and length == len(routes):
            return cached
        paths = tuple(str(getattr(route, "path", "{")) for route in routes)
        plain = all(type(route).matches in _PLAIN_MATCHES for route in routes)
        literal = plain and bool(paths) and not any("{" in path for path in paths)
        self._suffixes = (id(routes), len(routes), paths if literal else None)
        return paths if literal else None


def _plain_matches() -> tuple[Any, ...]:
    """The ``matches`` of the route kinds whose match is the path's full regex match."""
    from fastapi.routing import APIRoute, APIWebSocketRoute

    return (Route.matches, WebSocketRoute.matches, APIRoute.matches, APIWebSocketRoute.matches)


_PLAIN_MATCHES = _plain_matches()
