"""The answer counters of a worker: responses by route and status, 422 suggestions by type and
route, and contract bytes per answer, counted per answer document on the request path.

A provider answers the same 422 document again and again (the render cache hands out the very
bytes object of its entry), so ``AnswerCounters`` keeps one record per document with what it
counts towards — its labels, its suggestion types and its contract bytes, worked out once — and a
refusal only adds one to that record's count. When the SDK collects, the counts are folded into
the labelled totals (work per distinct document, not per request) and reported through
observable counters. Other answers (a 200, a 400, an existing app's own) add to the totals
directly. Every answer is counted before it is sent: nothing is sampled or dropped.

Bounded: at most ``capacity`` documents are kept (when full, every record is folded and dropped;
the next requests rebuild what they use) and as many contract-byte counts by answer bytes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from ..client.stats import contract_bytes
from ..server.domain import Route
from ..server.provider import Outcome
from .totals import Labels

CAPACITY = 512
"""Answer documents (and contract-byte counts) remembered at once."""

_INSTRUMENTS = (
    (
        "responses",
        "invalidation_contracts.http.responses",
        "{response}",
        "Answers of the domain's routes, by route and status.",
    ),
    (
        "refusals",
        "invalidation_contracts.http.refusals",
        "{suggestion}",
        "Violations answered 422, by route and suggestion type.",
    ),
    (
        "contract_bytes",
        "invalidation_contracts.http.contract_bytes",
        "By",
        "Bytes of the answers that are contract (protocol.wirecost), by route and status; over "
        "http.responses, the mean per answer.",
    ),
)


@dataclass(slots=True)
class _Document:
    """One 422 document on one route: what one answer of it counts, and how often it was sent
    since the last fold."""

    content: bytes
    route: str
    labels: Labels
    types: tuple[Labels, ...]
    size: int
    count: int = 0


class AnswerCounters:
    """Responses, refusals and contract bytes of one worker (see the module docstring)."""

    def __init__(self, meter: Meter, *, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._totals: dict[str, dict[Labels, int]] = {name: {} for name, *_ in _INSTRUMENTS}
        self._documents: dict[int, _Document] = {}
        self._bytes: dict[bytes, int] = {}
        for name, instrument, unit, description in _INSTRUMENTS:
            meter.create_observable_counter(
                instrument, callbacks=[self._reader(name)], unit=unit, description=description
            )

    def zero(self, routes: Iterable[str], statuses: Iterable[int]) -> None:
        """Report responses and contract bytes of each route with each status at 0 from the
        start (refusals by suggestion type appear with their first refusal: a policy does not
        declare the types it may find)."""
        with self._lock:
            for route in routes:
                for status in statuses:
                    labels = (("http.route", route), ("http.status_code", status))
                    self._totals["responses"].setdefault(labels, 0)
                    self._totals["contract_bytes"].setdefault(labels, 0)

    def refused(self, route: Route[Any], refusal: Outcome) -> None:
        """Count a 422 answer: one addition to its document's record."""
        content = refusal.content
        with self._lock:
            found = self._documents.get(id(content))
            if found is None or found.content is not content or found.route != route.path:
                found = self._document(route, refusal)
            found.count += 1

    def answered(self, route: Route[Any], status: int, content: object) -> None:
        """Count any other answer, with the contract bytes of ``content`` (bytes; else none)."""
        labels = (("http.route", route.path), ("http.status_code", status))
        size = self.contract_bytes(content) if isinstance(content, bytes) and content else None
        with self._lock:
            responses = self._totals["responses"]
            responses[labels] = responses.get(labels, 0) + 1
            if size is not None:
                sizes = self._totals["contract_bytes"]
                sizes[labels] = sizes.get(labels, 0) + size

    def totals(self, name: str) -> dict[Labels, int]:
        """The totals of ``name`` (responses, refusals or contract_bytes) by label set now."""
        with self._lock:
            self._fold()
            return dict(self._totals[name])

    def contract_bytes(self, content: bytes) -> int:
        """The contract's bytes in an answer, remembered by the answer's bytes (equal bytes,
        equal count)."""
        found = self._bytes.get(content)
        if found is None:
            try:
                document = json.loads(content)
            except ValueError:
                return 0
            found = contract_bytes(document) if isinstance(document, dict) else 0
            if len(self._bytes) >= self.capacity:
                self._bytes.clear()
            self._bytes[content] = found
        return found

    def _document(self, route: Route[Any], refusal: Outcome) -> _Document:
        """The record of a document not seen yet (the caller holds the lock)."""
        if len(self._documents) >= self.capacity:
            self._fold()
            self._documents.clear()
        path = route.path
        made = _Document(
            refusal.content,
            path,
            (("http.route", path), ("http.status_code", refusal.status)),
            tuple(
                (("http.route", path), ("suggestion.type", f.violation.type))
                for f in refusal.findings
            ),
            self.contract_bytes(refusal.content),
        )
        self._documents[id(refusal.content)] = made  # holds the bytes: the id stays unique
        return made

    def _fold(self) -> None:
        """Move every document's count into the totals (the caller holds the lock)."""
        responses, refusals = self._totals["responses"], self._totals["refusals"]
        sizes = self._totals["contract_bytes"]
        for document in self._documents.values():
            count = document.count
            if not count:
                continue
            document.count = 0
            labels = document.labels
            responses[labels] = responses.get(labels, 0) + count
            sizes[labels] = sizes.get(labels, 0) + count * document.size
            for types in document.types:
                refusals[types] = refusals.get(types, 0) + count

    def _reader(self, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            return [Observation(value, dict(labels)) for labels, value in self.totals(name).items()]

        return observe
