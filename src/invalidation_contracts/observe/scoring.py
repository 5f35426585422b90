"""Client scoring from requests alone (paper §6.5): stale injections and first-try compliance.

The provider sees each client's requests and what it answered. ``ClientScores`` folds them, per
opaque client key, into the paper's figures without any help from the client:

- **Episodes and retries.** A request that follows a 422 on the same route is a retry, until
  ``max_attempts`` requests in a row were refused (the client's retry budget); any other request
  opens an episode.
- **First try.** An episode whose opening request passes every policy.
- **Stale injection.** An opening request that carries the parameters of a fix this provider
  taught the client (same type and scope, every parameter value equal) when that fix is no longer
  what the provider would answer for the request (``server.provider.current_fix`` on the request
  with the fix undone) — a value a change made stale since it was taught.

Sans-IO and bounded: at most ``max_clients`` clients (the least recently seen goes first) and
``max_fixes`` taught fixes per client.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..server.domain import Route
from ..server.policies import Finding
from ..server.provider import current_fix
from ..server.render_cache import finding_key
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
    slot: tuple[str, str]
    """Type and scope: the memory's key for the fix (one judgement per slot and request)."""
    key: tuple[str, str, str]
    """Type, scope and parameters: one taught fix."""
    anchor: tuple[str, str] | None
    """A parameter field and its value, by which a request that carries the fix is found."""
    policy: str
    """The policy that taught it (the only one run again to judge it)."""

    @classmethod
    def of(cls, finding: Finding) -> Taught:
        v = finding.violation
        scope, parameters = dict(v.scope), dict(v.parameters)
        slot = (v.type, _freeze(scope))
        first = min(parameters, default=None)
        anchor = None if first is None else (first, _freeze(parameters[first]))
        key = (*slot, _freeze(parameters))
        return cls(v.type, scope, parameters, slot, key, anchor, finding.policy)

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
    taught: OrderedDict[tuple[str, str, str], Taught] = field(default_factory=OrderedDict)
    by_anchor: dict[tuple[str, str], dict[tuple[str, str, str], Taught]] = field(
        default_factory=dict
    )
    """Taught fixes with parameters, by their anchor (oldest first)."""
    when: dict[tuple[str, str, str], int] = field(default_factory=dict)
    """When each taught fix was (last) taught, in this client's own count."""
    clock: int = 0
    anchor_fields: dict[str, int] = field(default_factory=dict)
    """Request fields some taught fix is anchored on, with how many fixes are."""


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
        self._lessons: dict[Hashable, Taught] = {}
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
            self._fold(self._client(client), route, request, state, findings)

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
        streak = known.streak.get(route.path, 0)
        opening = streak == 0 or streak >= self.max_attempts
        stale = self._stale(known, route, request, state, findings) if opening else 0
        for figures in (known.figures, self._totals):
            figures.requests += 1
            if opening:
                figures.episodes += 1
                figures.stale_injections += stale
                figures.first_try += 0 if findings else 1
            else:
                figures.retries += 1
            figures.refused += 1 if findings else 0
        if findings:
            known.streak[route.path] = 1 if opening else streak + 1
            for finding in findings:
                self._teach(known, self._taught(finding))
        else:
            known.streak.pop(route.path, None)

    def _taught(self, finding: Finding) -> Taught:
        """``Taught.of(finding)``, remembered by the finding's key (the render cache's)."""
        key = finding_key(finding)
        if key is None:
            return Taught.of(finding)
        found = self._lessons.get(key)
        if found is None:
            found = Taught.of(finding)
            if len(self._lessons) >= self.max_fixes:
                self._lessons.clear()
            self._lessons[key] = found
        return found

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
        if fix.anchor is None:
            return  # a fix that sets nothing is never carried by a request
        self._forget(client, fix)
        client.clock += 1
        client.when[fix.key] = client.clock
        client.taught[fix.key] = fix
        client.by_anchor.setdefault(fix.anchor, {})[fix.key] = fix
        client.anchor_fields[fix.anchor[0]] = client.anchor_fields.get(fix.anchor[0], 0) + 1
        while len(client.taught) > self.max_fixes:
            self._forget(client, next(iter(client.taught.values())))

    def _forget(self, client: _Client, fix: Taught) -> None:
        client.when.pop(fix.key, None)
        if client.taught.pop(fix.key, None) is not None and fix.anchor is not None:
            left = client.anchor_fields.get(fix.anchor[0], 0) - 1
            if left > 0:
                client.anchor_fields[fix.anchor[0]] = left
            else:
                client.anchor_fields.pop(fix.anchor[0], None)
            bucket = client.by_anchor.get(fix.anchor, {})
            bucket.pop(fix.key, None)
            if not bucket:
                client.by_anchor.pop(fix.anchor, None)

    def _stale(
        self,
        client: _Client,
        route: Route[Any],
        request: Mapping[str, Any],
        state: RegistryState,
        findings: tuple[Finding, ...],
    ) -> int:
        """How many taught fixes the request carries that are no longer current.

        A carried fix whose slot the request was refused for is stale outright (its values no
        longer pass); any other is judged by running its own policy on the request with the fix
        undone (``server.provider.current_fix``'s rule, one policy instead of the route's all).
        """
        if not client.by_anchor:
            return 0
        candidates: list[Taught] = []
        for name in client.anchor_fields.keys() & request.keys():
            bucket = client.by_anchor.get((name, _freeze(request[name])))
            if bucket:
                candidates.extend(bucket.values())
        candidates.sort(key=lambda fix: client.when.get(fix.key, 0), reverse=True)  # newest first
        refused = {(f.violation.type, _freeze(dict(f.violation.scope))) for f in findings}
        stale = 0
        seen: set[tuple[str, str]] = set()
        for fix in candidates:
            if fix.slot in seen or not fix.carried_by(request):
                continue
            seen.add(fix.slot)
            if fix.slot in refused:
                stale += 1
                continue
            now = _current(route, fix, fix.draft(request), state)
            if now is None or _freeze(now) != _freeze(dict(fix.parameters)):
                stale += 1
        return stale


def _current(
    route: Route[Any], fix: Taught, draft: Mapping[str, Any], state: RegistryState
) -> dict[str, Any] | None:
    """``server.provider.current_fix`` with only the policy that taught ``fix`` run."""
    return current_fix(_narrowed(route, fix.policy), draft, fix.type, fix.scope, state)


_NARROWED: dict[tuple[int, str], tuple[Route[Any], Route[Any]]] = {}


def _narrowed(route: Route[Any], policy: str) -> Route[Any]:
    """``route`` with only its policy named ``policy`` (itself when it has no such policy)."""
    found = _NARROWED.get((id(route), policy))
    if found is not None and found[0] is route:
        return found[1]
    own = tuple(p for p in route.policies if p.name == policy)
    narrowed = dataclasses.replace(route, policies=own) if own else route
    if len(_NARROWED) > 1024:
        _NARROWED.clear()
    _NARROWED[(id(route), policy)] = (route, narrowed)
    return narrowed


def _freeze(value: Any) -> str:
    """A JSON value as a hashable key (sorted members; equal values, equal keys)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _same(a: Any, b: Any) -> bool:
    return (a == b and type(a) is type(b)) or _freeze(a) == _freeze(b)
