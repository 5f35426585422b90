"""An agent for the end-to-end tests: a row-granularity fix memory behind the httpx transport,
solving Acme task families the way the harness's ``exact`` planner does (merge every fix)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import httpx

from invalidation_contracts.client import FixMemory
from invalidation_contracts.httpx import ContractTransport

ORIGIN = "http://acme.test"
MAX_ATTEMPTS = 5


class Recorder(httpx.BaseTransport):
    """The innermost transport: round-robin over ``urls`` (one origin), counting every answer."""

    def __init__(self, urls: Sequence[str], *, keepalive: bool = True) -> None:
        self.urls = [httpx.URL(u) for u in urls]
        limits = httpx.Limits(max_keepalive_connections=None if keepalive else 0)
        self.inner = httpx.HTTPTransport(limits=limits)
        self.turn = 0
        self.statuses: Counter[tuple[str, int]] = Counter()
        self.served: Counter[int | None] = Counter()
        """Requests answered per server port."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        target = self.urls[self.turn % len(self.urls)]
        self.turn += 1
        request.url = request.url.copy_with(
            scheme=target.scheme, host=target.host, port=target.port
        )
        request.headers["host"] = request.url.netloc.decode("ascii")  # the server checks Host
        response = self.inner.handle_request(request)
        self.statuses[(request.url.path, response.status_code)] += 1
        self.served[target.port] += 1
        return response

    def close(self) -> None:
        self.inner.close()

    def count(self, status: int) -> int:
        return sum(n for (_, s), n in self.statuses.items() if s == status)


class Agent:
    """Solves tasks against the servers at ``urls``, learning fixes in a row-granularity memory."""

    def __init__(self, urls: Sequence[str], *, keepalive: bool = True, watch: bool = False) -> None:
        """``watch``: keep a watch stream open (a drift is evicted before the next request)."""
        self.memory = FixMemory("row")
        self.recorder = Recorder(urls, keepalive=keepalive)
        transport = ContractTransport(
            self.memory, self.recorder, origin_of=lambda _: ORIGIN, watch=watch
        )
        self.http = httpx.Client(transport=transport, base_url=ORIGIN, timeout=30.0)

    def solve(self, draft: dict[str, Any], path: str = "/v1/subscriptions") -> int:
        """Attempts until a 200 (at most ``MAX_ATTEMPTS``); 0 when never accepted."""
        request = dict(draft)
        for entry in self.memory.lookup(ORIGIN, draft, operation=f"POST {path}").entries:
            request.update(entry.suggestion.parameters)
        for attempt in range(1, MAX_ATTEMPTS + 1):
            response = self.http.post(path, json=request)
            if response.status_code == 200:
                return attempt
            for suggestion in response.json().get("recovery_feedback", {}).get("suggestions", []):
                request.update(suggestion["parameters"])
        return 0

    def live(self) -> list[str]:
        """The live entries, as ``TYPE plan`` (the fix's type and the plan it is scoped to)."""
        return sorted(_name(e.suggestion) for e in self.memory.entries(ORIGIN))

    def evictions(self) -> list[tuple[str, str]]:
        """``(TYPE plan, reason)`` of every evicted entry."""
        return sorted(
            (_name(t.entry.suggestion), t.reason.value) for t in self.memory.tombstones(ORIGIN)
        )

    def close(self) -> None:
        self.http.close()
        self.memory.close()


def _name(suggestion: Any) -> str:
    return f"{suggestion.type} {(suggestion.scope or {}).get('plan', '')}".strip()
