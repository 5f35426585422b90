"""Client scoring from requests alone (paper §6.5): stale injections and first-try compliance.

The provider sees each client's requests and what it answered. ``ClientScores`` folds them, per
opaque client key, into the paper's figures without any help from the client:

- **Episodes and retries.** A request that follows a 422 on the same route is a retry, until
  ``max_attempts`` requests in a row were refused (the client's retry budget); any other request
  opens an episode.
- **First try.** An episode whose opening request passes every policy.
- **Stale injection.** An opening request that carries the parameters of a fix this provider
  taught the client (same type and scope, every parameter value equal) when that fix is no longer
  what the provider would answer for the request (``server.oracle.current_fix`` on the request
  with the fix undone) — a value a change made stale since it was taught.

Sans-IO and bounded: at most ``max_clients`` clients (the least recently seen goes first) and
``max_fixes`` taught fixes per client.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..protocol.canonical import canonical_json
from ..server.domain import Route
from ..server.oracle import current_fix
from ..server.policies import Finding
from ..server.state import RegistryState

DEFAULT_MAX_ATTEMPTS = 5
"""The retry budget assumed for a client (the harness scenarios' default ``max_attempts``)."""
DEFAULT_MAX_CLIENTS = 10_000
DEFAULT_MAX_FIXES = 1_000


@dataclass(frozen=True, slots=True)
class Taught:
    """A fix the provider answered a client with: its type, scope and parameters."""

    type: str
    scope: Mapping[str, Any]
    parameters: Mapping[str, Any]

    @classmethod
    def of(cls, finding: Finding) -> Taught:
        v = finding.violation
        return cls(v.type, dict(v.scope), dict(v.parameters))

    def carried_by(self, request: Mapping[str, Any]) -> bool:
        """The request carries every parameter of the fix and matches its scope elsewhere (a
        scope field the fix rewrites held the scope's value before the fix, not after)."""
        wanted = {**self.scope, **self.parameters}
        return all(field in request and _same(request[field], v) for field, v in wanted.items())

    def draft(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The request as it was before the fix: its parameters undone (back to the scope's
        value, or left out)."""
        out = {k: v for k, v in request.items() if k not in self.parameters}
        out.update({k: v for k, v in self.scope.items() if k in self.parameters})
        return out


@dataclass
class ClientFigures:
    """One client's figures so far."""

    requests: int = 0
    episodes: int = 0
    first_try: int = 0
    retries: int = 0
    stale_injections: int = 0
    refused: int = 0

    @property
    def first_try_rate(self) -> float | None:
        return self.first_try / self.episodes if self.episodes else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "episodes": self.episodes,
            "first_try": self.first_try,
            "first_try_rate": self.first_try_rate,
            "retries": self.retries,
            "stale_injections": self.stale_injections,
            "refused": self.refused,
        }


@dataclass
class _Client:
    figures: ClientFigures = field(default_factory=ClientFigures)
    streak: dict[str, int] = field(default_factory=dict)
    """Route → requests refused in a row."""
    taught: OrderedDict[tuple[str, bytes, bytes], Taught] = field(default_factory=OrderedDict)


class ClientScores:
    """Every client's figures, folded from the provider's checks (see the module docstring)."""

    def __init__(
        self,
        *,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        max_clients: int = DEFAULT_MAX_CLIENTS,
        max_fixes: int = DEFAULT_MAX_FIXES,
    ) -> None:
        if max_attempts < 1 or max_clients < 1 or max_fixes < 1:
            raise ValueError("max_attempts, max_clients and max_fixes must be at least 1")
        self.max_attempts = max_attempts
        self.max_clients = max_clients
        self.max_fixes = max_fixes
        self._clients: OrderedDict[str, _Client] = OrderedDict()
        self._totals = ClientFigures()
        self._lock = threading.Lock()

    def checked(
        self,
        client: str,
        route: Route[Any],
        request: Mapping[str, Any],
        state: RegistryState,
        findings: tuple[Finding, ...],
    ) -> None:
        """One valid request of ``client`` and the findings it drew (none: it passed)."""
        with self._lock:
            known = self._client(client)
            before = ClientFigures(**vars(known.figures))
            self._fold(known, route, request, state, findings)
            for name, value in vars(known.figures).items():
                moved = value - getattr(before, name)
                setattr(self._totals, name, getattr(self._totals, name) + moved)

    def totals(self) -> ClientFigures:
        """Every client's figures summed, forgotten clients included (for counters)."""
        with self._lock:
            return ClientFigures(**vars(self._totals))

    def _fold(
        self,
        known: _Client,
        route: Route[Any],
        request: Mapping[str, Any],
        state: RegistryState,
        findings: tuple[Finding, ...],
    ) -> None:
        figures = known.figures
        figures.requests += 1
        streak = known.streak.get(route.path, 0)
        opening = streak == 0 or streak >= self.max_attempts
        if opening:
            figures.episodes += 1
            figures.stale_injections += self._stale(known, route, request, state)
            if not findings:
                figures.first_try += 1
        else:
            figures.retries += 1
        if findings:
            figures.refused += 1
            known.streak[route.path] = 1 if opening else streak + 1
            for finding in findings:
                self._teach(known, Taught.of(finding))
        else:
            known.streak.pop(route.path, None)

    def figures(self, client: str) -> ClientFigures | None:
        with self._lock:
            found = self._clients.get(client)
            return None if found is None else ClientFigures(**vars(found.figures))

    def snapshot(self) -> dict[str, ClientFigures]:
        """Every client's figures now, by client key."""
        with self._lock:
            return {key: ClientFigures(**vars(c.figures)) for key, c in self._clients.items()}

    def _client(self, key: str) -> _Client:
        found = self._clients.get(key)
        if found is None:
            found = self._clients[key] = _Client()
            while len(self._clients) > self.max_clients:
                self._clients.popitem(last=False)
        else:
            self._clients.move_to_end(key)
        return found

    def _teach(self, client: _Client, fix: Taught) -> None:
        key = (fix.type, canonical_json(dict(fix.scope)), canonical_json(dict(fix.parameters)))
        client.taught.pop(key, None)
        client.taught[key] = fix
        while len(client.taught) > self.max_fixes:
            client.taught.popitem(last=False)

    def _stale(
        self, client: _Client, route: Route[Any], request: Mapping[str, Any], state: RegistryState
    ) -> int:
        """How many taught fixes the request carries that are no longer current."""
        stale = 0
        seen: set[tuple[str, bytes]] = set()
        for fix in reversed(client.taught.values()):
            slot = (fix.type, canonical_json(dict(fix.scope)))
            if slot in seen or not fix.carried_by(request):
                continue
            seen.add(slot)
            now = current_fix(route, fix.draft(request), fix.type, fix.scope, state)
            if now is None or canonical_json(now) != canonical_json(dict(fix.parameters)):
                stale += 1
        return stale


def _same(a: Any, b: Any) -> bool:
    return a == b and type(a) is type(b) or canonical_json(a) == canonical_json(b)
