"""Client scoring from requests alone (paper §6.5): stale values sent and first-try compliance.

The provider sees each client's requests and what it answered. ``ClientScores`` folds them, per
opaque client key, into the paper's figures without any help from the client:

- **Episodes and retries.** A request that follows a 422 on the same route is a retry, until
  ``max_attempts`` requests in a row were refused (the client's retry budget); any other request
  opens an episode.
- **First try.** An episode whose opening request passes every policy.
- **Stale values sent.** Per opening request, the fixes this provider taught the client (same
  type and scope, every parameter value equal) that the request carries although the provider
  would no longer answer them for it (``server.provider.current_fix`` on the request with the fix
  undone): values a change made stale since they were taught. A server sees requests, not
  prompts: a stale fix a client showed its model and the model ignored never reaches it, so this
  is the harness's *stale values sent* (``RunMetrics.stale_values_sent``), not its *stale
  injections* (stale fixes shown to the model).

Cheap where it runs (every policy check): what a refusal teaches is built once per 422 document
(``observe.lessons``), a request finds the taught fixes it may carry by one dict lookup per
anchored field, teaching a fix again only moves its time, and a carried fix's policy runs again
once per fix, request and served state, not on every request that repeats it. Every request is
folded before it is answered: nothing is sampled or dropped, so the figures are exact.

Sans-IO and bounded: at most ``max_clients`` clients and ``max_fixes`` taught fixes per client.
When full, a new client replaces the least busy one kept (fewest requests, counted up to
``BUSY_CAP``; among equals the least recently seen): the busiest clients stay, and a flood of
fresh keys (anyone can mint bearer tokens) churns among its own keys. A flood whose keys send
``n`` requests each can push out only clients with at most ``n`` requests (and, as the flood
begins, one client with more: the one its first key replaces); a client past ``BUSY_CAP``
requests is pushed out only by keys that each sent ``BUSY_CAP``. Forgotten clients' figures stay
in the totals.
"""

from __future__ import annotations

import dataclasses
import heapq
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..server.domain import Route
from ..server.policies import Finding
from ..server.provider import current_fix
from ..server.state import RegistryState
from .lessons import Lessons, RefusalLesson, Taught, ValueKey, freeze, same_object, value_key

if TYPE_CHECKING:
    from ..server.registry import Registry

DEFAULT_MAX_ATTEMPTS = 5
"""The retry budget assumed for a client (the harness scenarios' default ``max_attempts``)."""
DEFAULT_MAX_CLIENTS = 10_000
DEFAULT_MAX_FIXES = 1_000
BUSY_CAP = 64
"""Requests past which clients count as equally busy (eviction then goes by recency alone)."""
JUDGED_PER_FIX = 8
"""Drafts whose judgement is kept per taught fix while the served state stays the same."""


Checked = tuple[Route[Any], Mapping[str, Any], RegistryState, RefusalLesson | None]
"""One policy check to fold: the route, the request, the state it was checked on, its lesson."""


class Scores(Protocol):
    """Where the provider's checks are folded and the figures read: ``ClientScores`` (one
    process) or ``observe.shared.SharedScores`` (every worker of a registry)."""

    scope: str | None
    """The ``worker`` label of the figures (None: this worker's own)."""

    def checked(
        self,
        client: str,
        route: Route[Any],
        request: Mapping[str, Any],
        state: RegistryState,
        findings: tuple[Finding, ...],
        document: bytes | None = None,
    ) -> None: ...

    def attach(self, registry: Registry, routes: Sequence[Route[Any]]) -> None:
        """Begin scoring for the worker that serves ``registry`` and ``routes``."""

    def totals(self) -> ClientFigures: ...

    def figures(self, client: str) -> ClientFigures | None: ...

    def busiest(self, n: int) -> list[tuple[str, ClientFigures]]: ...

    def snapshot(self) -> dict[str, ClientFigures]: ...

    def __len__(self) -> int: ...

    @property
    def forgotten(self) -> int: ...

    def close(self) -> None: ...


@dataclass
class ClientFigures:
    """One client's figures so far."""

    requests: int = 0
    episodes: int = 0
    first_try: int = 0
    retries: int = 0
    stale_values_sent: int = 0
    """Taught fixes a change made stale that opening requests carried (one per fix slot)."""
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
            "stale_values_sent": self.stale_values_sent,
            "refused": self.refused,
        }


Anchor = tuple[str, ValueKey]
FixKey = tuple[str, str, str]


@dataclass
class _Client:
    figures: ClientFigures = field(default_factory=ClientFigures)
    streak: dict[str, int] = field(default_factory=dict)
    """Route → requests refused in a row."""
    taught: OrderedDict[FixKey, Taught] = field(default_factory=OrderedDict)
    """Every fix taught (with parameters), least recently taught first."""
    by_anchor: dict[Anchor, dict[FixKey, Taught]] = field(default_factory=dict)
    """Taught fixes by their anchor: a request's candidates are one lookup per anchor field."""
    when: dict[FixKey, int] = field(default_factory=dict)
    """When each taught fix was (last) taught, in this client's own count."""
    clock: int = 0
    busy: int = 0
    """Requests seen, up to ``BUSY_CAP``: the rank that eviction goes by."""
    anchor_fields: dict[str, int] = field(default_factory=dict)
    """Request fields some taught fix is anchored on, with how many fixes are."""


class ClientScores:
    """Every client's figures, folded from the provider's checks (see the module docstring)."""

    scope: str | None = None

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
        self._clients: dict[str, _Client] = {}
        self._ranks: dict[int, OrderedDict[str, None]] = {}
        """Client keys by ``busy``, least recently seen first (eviction's order)."""
        self._forgotten = ClientFigures()
        """The figures of clients no longer kept (``totals`` adds the kept ones when read)."""
        self.forgotten = 0
        """Clients forgotten to make room (many: someone mints client keys)."""
        self._lessons = Lessons(max_fixes)
        self._judge = _Judgements(max_fixes)
        self._lock = threading.Lock()

    def checked(
        self,
        client: str,
        route: Route[Any],
        request: Mapping[str, Any],
        state: RegistryState,
        findings: tuple[Finding, ...],
        document: bytes | None = None,
    ) -> None:
        """One valid request of ``client`` and the findings it drew (none: it passed).
        ``document``: the 422 answered, as sent (what its lesson is kept by; None: not kept)."""
        with self._lock:
            lesson = self._lessons.of(findings, document) if findings else None
            self._fold(self._client(client), route, request, state, lesson)

    def fold(
        self,
        data: Mapping[str, Any] | None,
        figures: ClientFigures,
        events: Iterable[Checked],
    ) -> dict[str, Any]:
        """``checked`` for a client kept elsewhere (``observe.shared``), over its ``events`` in
        order: its state as ``data`` (``None``: a new client) and ``figures`` (updated in
        place) in, its new state out. The client is not kept here."""
        with self._lock:
            known = _Client(figures=figures)
            for type_, scope, parameters, policy, when in (data or {}).get("taught", ()):
                fix = Taught.build(type_, scope, parameters, policy)
                self._teach(known, fix)
                known.when[fix.key] = when
            known.streak = dict((data or {}).get("streak", {}))
            known.clock = int((data or {}).get("clock", 0))
            for route, request, state, lesson in events:
                self._fold(known, route, request, state, lesson)
            return {
                "streak": known.streak,
                "clock": known.clock,
                "taught": [
                    [f.type, f.scope, f.parameters, f.policy, known.when.get(f.key, 0)]
                    for f in known.taught.values()
                ],
            }

    def lesson(self, findings: tuple[Finding, ...], document: bytes | None) -> RefusalLesson | None:
        """What a check's ``findings`` (answered as ``document``) taught (None: it passed)."""
        if not findings:
            return None
        with self._lock:
            return self._lessons.of(findings, document)

    def attach(self, registry: Registry, routes: Sequence[Route[Any]]) -> None:
        """Nothing to begin (a ``SharedScores`` starts its flush thread)."""

    def close(self) -> None:
        """Nothing to release (a shared store's ``SharedScores`` has a connection)."""

    def totals(self) -> ClientFigures:
        """Every client's figures summed, forgotten clients included (for counters; summed when
        read, so a request updates one client's figures only)."""
        with self._lock:
            total = ClientFigures(**vars(self._forgotten))
            for known in self._clients.values():
                _add(total, known.figures)
            return total

    def figures(self, client: str) -> ClientFigures | None:
        with self._lock:
            found = self._clients.get(client)
            return None if found is None else ClientFigures(**vars(found.figures))

    def __len__(self) -> int:
        """Clients kept now."""
        return len(self._clients)

    def busiest(self, n: int) -> list[tuple[str, ClientFigures]]:
        """The ``n`` clients kept with the most requests (ties: by key), with their figures."""
        with self._lock:
            top = heapq.nsmallest(
                n, self._clients.items(), key=lambda item: (-item[1].figures.requests, item[0])
            )
            return [(key, ClientFigures(**vars(c.figures))) for key, c in top]

    def snapshot(self) -> dict[str, ClientFigures]:
        """Every client's figures now, by client key."""
        with self._lock:
            return {key: ClientFigures(**vars(c.figures)) for key, c in self._clients.items()}

    def _fold(
        self,
        known: _Client,
        route: Route[Any],
        request: Mapping[str, Any],
        state: RegistryState,
        lesson: RefusalLesson | None,
    ) -> None:
        streak = known.streak.get(route.path, 0)
        opening = streak == 0 or streak >= self.max_attempts
        stale = self._stale(known, route, request, state, lesson) if opening else 0
        figures = known.figures
        figures.requests += 1
        if opening:
            figures.episodes += 1
            figures.stale_values_sent += stale
            figures.first_try += 0 if lesson else 1
        else:
            figures.retries += 1
        figures.refused += 1 if lesson else 0
        if lesson is not None:
            known.streak[route.path] = 1 if opening else streak + 1
            taught, when = known.taught, known.when
            for fix in lesson.fixes:
                known.clock += 1
                when[fix.key] = known.clock
                if fix.key in taught:  # taught again: only its time moves
                    taught.move_to_end(fix.key)
                else:
                    self._teach(known, fix)
        else:
            known.streak.pop(route.path, None)

    def _client(self, key: str) -> _Client:
        found = self._clients.get(key)
        if found is None:
            if len(self._clients) >= self.max_clients:
                self._evict()
            found = self._clients[key] = _Client()
        else:
            self._ranks[found.busy].pop(key)
            if not self._ranks[found.busy]:
                del self._ranks[found.busy]
        found.busy = min(found.busy + 1, BUSY_CAP)
        self._ranks.setdefault(found.busy, OrderedDict())[key] = None
        return found

    def _evict(self) -> None:
        """Forget the least busy client (the least recently seen among equals)."""
        rank = min(self._ranks)
        keys = self._ranks[rank]
        key, _ = keys.popitem(last=False)
        if not keys:
            del self._ranks[rank]
        _add(self._forgotten, self._clients.pop(key).figures)
        self.forgotten += 1

    def _teach(self, client: _Client, fix: Taught) -> None:
        """Remember ``fix``, not taught to ``client`` before, as taught (its time is set)."""
        assert fix.anchor is not None  # RefusalLesson.fixes holds only fixes that set something
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
        lesson: RefusalLesson | None,
    ) -> int:
        """How many taught fixes the request carries that are no longer current.

        Candidates are found by one dict lookup per anchored field the request holds. A carried
        fix whose slot the request was refused for is stale outright (its values no longer
        pass); any other is judged by running its own policy on the request with the fix undone
        (``server.provider.current_fix``, one policy instead of the route's all), once per fix,
        request and served state (``_Judgements``).
        """
        if not client.by_anchor:
            return 0
        candidates: list[Taught] = []
        for name, _count in client.anchor_fields.items():
            if name in request:
                bucket = client.by_anchor.get((name, value_key(request[name])))
                if bucket:
                    candidates.extend(bucket.values())
        if not candidates:
            return 0
        if len(candidates) > 1:
            candidates.sort(key=lambda fix: client.when.get(fix.key, 0), reverse=True)
        refused = lesson.refused if lesson is not None else frozenset()
        stale = 0
        seen: set[tuple[str, str]] = set()
        for fix in candidates:
            if fix.slot in seen or not fix.carried_by(request):
                continue
            seen.add(fix.slot)
            if fix.slot in refused or not self._judge.current(route, fix, request, state):
                stale += 1
        return stale


def _add(total: ClientFigures, figures: ClientFigures) -> None:
    for name, value in vars(figures).items():
        setattr(total, name, getattr(total, name) + value)


class _Judgements:
    """Whether a taught fix is still current for a request, kept while the served state is the
    same (a change lands as a new state, which clears them): the policy runs once per fix,
    request and state, not on every request that carries the fix. Kept by the request, not by
    its draft (the request with the fix undone, a function of the two): a repeated request
    finds its verdict without building the draft."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._state: RegistryState | None = None
        self._kept: dict[tuple[str, str, FixKey], list[tuple[dict[str, Any], bool]]] = {}

    def current(
        self, route: Route[Any], fix: Taught, request: Mapping[str, Any], state: RegistryState
    ) -> bool:
        if state is not self._state:
            self._state = state
            self._kept.clear()
        key = (route.path, fix.policy, fix.key)
        kept = self._kept.get(key)
        if kept is None:
            if len(self._kept) >= self.capacity:
                self._kept.clear()
            kept = self._kept[key] = []
        for seen, verdict in kept:
            if same_object(seen, request):  # the same request: the same draft, the same verdict
                return verdict
        draft = fix.draft(request)
        now = current_fix(_narrowed(route, fix.policy), draft, fix.type, fix.scope, state)
        verdict = now is not None and freeze(now) == fix.key[2]
        if len(kept) >= JUDGED_PER_FIX:
            del kept[0]
        kept.append((dict(request), verdict))
        return verdict


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
