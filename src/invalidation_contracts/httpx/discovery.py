"""Where each origin's contract routes live, learned from the ``Link`` its responses carry.

The memory asks for ``/contract/changes`` and ``/contract/rules`` (``events``); the transport
fetches them under the location the server advertised (``protocol.links``), so a contract router
mounted under ``/api`` still answers row-precise changes. A link to another origin is ignored (a
fetch forwards the agent's credentials), and the table of locations is bounded. Before any
response has taught an origin's location, a fetch goes to the root; a 404 there, for a fetch made
before this transport read any response of the origin (``begin_episode``), leaves the need
outstanding, so the first response can name the location, rather than falling back to
table-granularity eviction. The memory keeps each origin's location (``OriginState``), so a new
process fetches at the right place from its first read instead of withholding every fix until a
response names it again.
"""

from __future__ import annotations

from collections import OrderedDict

import httpx

from ..protocol.links import DEFAULT_CONTRACT_PATH, MAX_CONTRACT_PATH, contract_target

DEFERRED = "404 at the default contract location; waiting for a response that names it (Link)"
"""The ``FetchFailed`` detail of a deferred fetch."""
MAX_ORIGINS = 1024
"""How many origins' locations a transport remembers (least recently learned go first)."""


class ContractLocations:
    """Each origin's contract base URL (``scheme://host:port/prefix/contract``)."""

    def __init__(self, max_origins: int = MAX_ORIGINS) -> None:
        self._bases: OrderedDict[str, httpx.URL] = OrderedDict()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._max = max_origins

    def learn(self, origin: str, url: httpx.URL, headers: httpx.Headers) -> str | None:
        """Read the contract link of a response to a request for ``url`` (if any); the base
        when it is new or moved (for the memory to keep), else None."""
        self._seen[origin] = None
        self._seen.move_to_end(origin)
        while len(self._seen) > self._max:
            self._seen.popitem(last=False)
        target = None
        for value in headers.get_list("link"):
            target = contract_target(value)
            if target is not None:
                break
        if target is None:
            return None
        try:
            resolved = url.join(target)
        except (httpx.InvalidURL, ValueError):
            return None
        same = (resolved.scheme, resolved.host, resolved.port) == (url.scheme, url.host, url.port)
        path = resolved.path.rstrip("/")
        if not same or not path.startswith("/") or len(path) > MAX_CONTRACT_PATH:
            return None
        base = resolved.copy_with(path=path, query=None, fragment=None)
        moved = self._bases.get(origin) != base
        self._bases[origin] = base
        self._bases.move_to_end(origin)
        while len(self._bases) > self._max:
            self._bases.popitem(last=False)
        return str(base) if moved else None

    def restore(self, origin: str, base: str) -> None:
        """Take ``origin``'s location as a memory kept it (a new process), unless a response
        named one already; a base of another origin is ignored, as a ``Link`` to it would be."""
        if origin in self._bases:
            return
        try:
            url = httpx.URL(base)
            home = httpx.URL(origin)
        except (httpx.InvalidURL, ValueError):
            return
        same = (url.scheme, url.host, url.port) == (home.scheme, home.host, home.port)
        path = url.path.rstrip("/")
        if same and path.startswith("/") and len(path) <= MAX_CONTRACT_PATH:
            self._bases[origin] = url.copy_with(path=path, query=None, fragment=None)
            while len(self._bases) > self._max:
                self._bases.popitem(last=False)

    def known(self, origin: str) -> bool:
        return origin in self._bases

    def url(self, origin: str, path: str) -> httpx.URL:
        """Where to fetch ``path`` (a ``/contract/...`` path) of ``origin``."""
        base = self._bases.get(origin)
        if base is None or not path.startswith(DEFAULT_CONTRACT_PATH):
            return httpx.URL(origin.rstrip("/") + path)
        return base.copy_with(path=base.path + path[len(DEFAULT_CONTRACT_PATH) :])

    def deferred(self, origin: str, url: httpx.URL, response: httpx.Response) -> bool:
        """Learn from a fetch's answer; whether its 404 (at the default location) leaves the need
        outstanding: only when no response of the origin has been read yet (a fetch of
        ``begin_episode``), so the next response can name the location first."""
        unseen = origin not in self._seen
        self.learn(origin, url, response.headers)
        return response.status_code == 404 and unseen and origin not in self._bases
