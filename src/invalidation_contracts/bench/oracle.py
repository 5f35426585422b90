"""The evaluator's oracle: labels every eviction and injection of a run; strategies never see it.

It keeps, for each memory entry, the fix the entry holds and the request whose response taught it,
and answers with the shadow registry (which receives the same drift as the server) whether that fix
is still what the server would say for that request. An entry the memory learned later than the
response that carried its fix (the deferred path: invalidate first, then learn) is matched to that
response by its key, so no eviction goes unlabelled; one that cannot be matched stops the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..client.entries import canonical_scope
from ..client.events import Stored
from ..domains.catalog import DomainCatalog
from ..protocol.canonical import canonical_json
from ..protocol.models import Suggestion
from ..server import Registry, Route
from .errors import UnlabelledEviction

_Sent = tuple[dict[str, Any], "Route[Any] | None"]
"""A request as sent, and the route it went to (None: the catalog's default)."""


class Oracle:
    """Labels for one run: the fix and the request of every entry, judged against ``shadow``."""

    def __init__(self, catalog: DomainCatalog, shadow: Registry) -> None:
        self._catalog = catalog
        self._shadow = shadow
        self._received: dict[tuple[str, str], list[tuple[Suggestion, _Sent]]] = {}
        """(fix type, canonical scope) → every (suggestion, request) received, oldest first."""
        self._learned_on: dict[str, _Sent] = {}
        self._fixes: dict[str, Suggestion] = {}
        self._marked: set[str] = set()

    def heard(
        self,
        request: Mapping[str, Any],
        suggestions: Iterable[Suggestion],
        route: Route[Any] | None = None,
    ) -> None:
        """The response to ``request`` (sent to ``route``, the catalog's default when None)
        carried ``suggestions``: any may become an entry, now or once the memory has applied a
        pending diff."""
        for suggestion in suggestions:
            key = (suggestion.type, canonical_scope(suggestion.scope))
            self._received.setdefault(key, []).append((suggestion, (dict(request), route)))

    def learned(self, event: Stored, fix: Suggestion | None) -> None:
        """Register a stored entry: ``fix`` is the suggestion it holds (None if already gone).

        The request is the latest one whose response carried that fix under the entry's key.
        """
        candidates = self._received.get((event.key.type, event.key.scope), [])
        for suggestion, request in reversed(candidates):
            if fix is None or suggestion == fix:
                self._learned_on[event.entry_id] = request
                self._fixes[event.entry_id] = fix if fix is not None else suggestion
                return
        raise UnlabelledEviction(
            f"entry {event.entry_id} ({event.key.type}) was stored from no response the harness "
            "recorded; its evictions could not be labelled"
        )

    def is_stale(self, entry_id: str) -> bool:
        """Whether the entry's fix is no longer what the server says for the request it is from."""
        sent, fix = self._learned_on.get(entry_id), self._fixes.get(entry_id)
        if sent is None or fix is None:
            raise UnlabelledEviction(f"entry {entry_id} is unknown to the oracle; cannot label it")
        request, route = sent
        return not self.is_current(fix, request, route)

    def is_current(
        self, fix: Suggestion, request: Mapping[str, Any], route: Route[Any] | None = None
    ) -> bool:
        """Would the server still give ``fix`` for ``request`` on ``route`` (the catalog's
        default when None), under the shadow registry now?"""
        return self._catalog.is_fix_current(fix, request, self._shadow.state, route)

    def stale_sent(
        self,
        request: Mapping[str, Any],
        draft: Mapping[str, Any],
        route: Route[Any] | None = None,
    ) -> list[Suggestion]:
        """The stale values ``request`` sends for the task ``draft``: per fix slot (type and
        scope), the fix heard most recently that is a fix for this task (the draft holds its
        scope) and whose parameters the request carries, when the shadow registry — every change
        applied — no longer gives it for the draft. It was the server's answer when heard, so a
        change made it stale. Judged from what was sent, whatever the planner was shown."""
        out = []
        for heard in self._received.values():
            carried = next(
                (
                    fix
                    for fix, _ in reversed(heard)
                    if _holds(draft, fix.scope or {}) and _holds(request, fix.parameters)
                ),
                None,
            )
            if carried is not None and not self.is_current(carried, draft, route):
                out.append(carried)
        return out

    def newly_stale(self, entry_ids: Iterable[str]) -> list[str]:
        """After a drift event: the live entries that just went stale (each reported once)."""
        out = [e for e in entry_ids if e not in self._marked and self.is_stale(e)]
        self._marked.update(out)
        return out


def _holds(request: Mapping[str, Any], fields: Mapping[str, Any]) -> bool:
    """Whether ``request`` holds every one of ``fields`` with the same JSON value."""
    return all(
        name in request and canonical_json(request[name]) == canonical_json(value)
        for name, value in fields.items()
    )
