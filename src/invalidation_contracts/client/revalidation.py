"""Conditional reads for ``verify``: a fix revalidated against the resources its 422 cited.

A server without the contract may still serve its resources with validators, as GitHub and
Stripe do (``ETag``), and cite in a 422 the resources each suggestion read (``Link: <path>;
rel="related"; anchor="#/recovery_feedback/suggestions/N"``, ``protocol.links.citations``). The
``verify`` policy then keeps, with each fix, the paths it cites; their validators are fetched
when it is learned (``ReadResource``), and before the fix is injected in a later tick each is
read conditionally (``If-None-Match``): 304 keeps the fix, another tag or a 404 evicts it (reason
``row-changed``). A resource without a validator leaves the fix to the probe. Every read is a
probe call (``OriginStats.probes``) and a ``Revalidated`` event.

State: two parts of the origin's learner state (``OriginState.learner``, persisted with it):
``cites`` (entry id → paths) and ``validators`` (path → ``[etag or null, tick]``). Pure logic.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from .entries import EvictionReason
from .events import ReadResource, Revalidated
from .learner import EMPTY, SLACK, Learner
from .shared.ledger import Ledger

#: Without episodes (ticks are seconds), a read this recent counts as this tick's.
REVALIDATED_FOR_S = 1.0
#: Paths kept per fix (a server controls how many it cites).
MAX_CITES = 8


def cite_key(fix_type: object, scope: object) -> tuple[str, str]:
    """The key a suggestion's citations are filed under in a call: its type and scope."""
    return (str(fix_type), json.dumps(scope or {}, sort_keys=True, default=str))


def read_cites(tx: Ledger, body: Mapping[str, Any], cites: Mapping[int, tuple[str, ...]]) -> None:
    """File the citations of an observed response (by suggestion index) under each suggestion's
    type and scope, for the policy to keep with the fix it stores."""
    if not cites:
        return
    feedback = body.get("recovery_feedback")
    items = feedback.get("suggestions") if isinstance(feedback, Mapping) else None
    if not isinstance(items, list):
        return
    for index, paths in cites.items():
        if 0 <= index < len(items) and isinstance(items[index], Mapping):
            item = items[index]
            tx.cites[cite_key(item.get("type"), item.get("scope"))] = paths[:MAX_CITES]


class Citations:
    """A view over the ``cites`` and ``validators`` parts of an origin's learner state; like
    ``Learner`` it never changes a state in place."""

    def __init__(self, tx: Ledger) -> None:
        self.tx = tx

    @property
    def _data(self) -> Mapping[str, Any]:
        return self.tx.state.learner or EMPTY

    def _edit(self, name: str) -> dict[str, Any]:
        data = dict(self._data)
        part = data[name] = dict(data.get(name) or {})
        self.tx.state.learner = data
        return part

    def of(self, entry_id: str) -> tuple[str, ...]:
        """The paths the entry's fix cites (none: not revalidated by conditional reads)."""
        paths = (self._data.get("cites") or {}).get(entry_id)
        return tuple(p for p in paths if isinstance(p, str)) if isinstance(paths, list) else ()

    def validator(self, path: str) -> tuple[str | None, float] | None:
        """``(etag or None, tick read)`` of a path, or None before its first read."""
        found = (self._data.get("validators") or {}).get(path)
        if not (isinstance(found, list) and len(found) == 2):
            return None
        etag, at = found
        if not isinstance(at, (int, float)) or not (etag is None or isinstance(etag, str)):
            return None
        return etag, float(at)

    def citing(self, path: str) -> list[str]:
        """The live entries whose fix cites ``path``."""
        cites = self._data.get("cites") or {}
        return [
            e
            for e, paths in cites.items()
            if isinstance(paths, list) and path in paths and e in self.tx.index
        ]

    def cite(self, entry_id: str, paths: Iterable[str], now: float) -> None:
        """Keep ``paths`` with the entry, and ask for the validator of each not read ``now``."""
        paths = tuple(paths)[:MAX_CITES]
        self._edit("cites")[entry_id] = list(paths)
        for path in paths:
            held = self.validator(path)
            if held is None or not self.fresh(held[1], now):
                etag = held[0] if held is not None else None
                self.tx.wanted.append(ReadResource(self.tx.origin, path, etag))
        self.prune()

    def fresh(self, at: float, now: float) -> bool:
        """Whether a read at ``at`` counts as one of tick ``now``."""
        if self.tx.episode is not None:
            return at == now
        return now - at < REVALIDATED_FOR_S

    def due(self, entry_id: str, now: float) -> tuple[ReadResource, ...] | None:
        """The conditional reads the entry waits on before it is served at ``now`` (empty: none,
        serve it), or None when it cites none or one without a validator (the probe decides)."""
        paths = self.of(entry_id)
        if not paths:
            return None
        reads = []
        for path in paths:
            held = self.validator(path)
            if held is None or held[0] is None:
                return None
            if not self.fresh(held[1], now):
                reads.append(ReadResource(self.tx.origin, path, held[0], check=True))
        return tuple(reads)

    def answered(self, need: ReadResource, status: int | None, etag: str | None, now: float) -> str:
        """Fold the answer to a resource read; returns the ``Revalidated`` outcome."""
        validators = self._edit("validators")
        citing = self.citing(need.path)
        unchanged = status == 304 or (status == 200 and etag is not None and etag == need.etag)
        if unchanged and need.etag is not None:
            validators[need.path] = [need.etag, now]
            mind = Learner(self.tx.state)
            for entry_id in citing:
                mind.checked(entry_id, now)
            return "not-modified"
        if status == 200 and (not need.check or need.etag is None):
            validators[need.path] = [etag, now]
            return "learned" if etag is not None else "unavailable"
        if need.check and status in (200, 404, 410):
            gone = status != 200
            validators[need.path] = [None if gone else etag, now]
            why = f"{need.path} {'is gone' if gone else 'changed'} (conditional read)"
            for entry_id in citing:
                self.tx.evict(entry_id, EvictionReason.ROW_CHANGED, why)
            return "gone" if gone else "changed"
        validators[need.path] = [None, now]
        return "unavailable"

    def prune(self) -> None:
        """Forget the citations of entries no longer live, once they outnumber the live ones by
        ``SLACK``, and the validators no live citation names."""
        cites = self._data.get("cites") or {}
        if len(cites) <= len(self.tx.index) + SLACK:
            return
        kept = {e: p for e, p in cites.items() if e in self.tx.index}
        named = {path for paths in kept.values() for path in paths}
        self._edit("cites").clear()
        self._edit("cites").update(kept)
        validators = self._edit("validators")
        for path in [p for p in validators if p not in named]:
            del validators[path]


def resource_answered(
    tx: Ledger, need: ReadResource, status: int | None, etag: str | None, now: float
) -> None:
    """A resource read was answered (``status`` None: it could not be fetched)."""
    citations = Citations(tx)
    entries = tuple(citations.citing(need.path))
    outcome = citations.answered(need, status, etag, now)
    if status is not None:
        tx.stats.probes += 1
    event = Revalidated(
        origin=tx.origin, episode=tx.episode, path=need.path, outcome=outcome, entries=entries
    )
    tx.emit(event)
