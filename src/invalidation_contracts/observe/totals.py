"""Counters whose hot path is a dictionary update: totals read by the SDK when it collects.

``TotalCounter.add`` adds to a plain integer under a lock; the OpenTelemetry observable counter it
registers reports every total at collection time. A request therefore never runs SDK code for
these counters (an SDK ``Counter.add`` costs tens of microseconds), and a backend that is slow
or down never reaches a request's path.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from opentelemetry.metrics import CallbackOptions, Meter, Observation

Labels = tuple[tuple[str, str | int], ...]


class TotalCounter:
    """A monotonic counter kept as totals per label set (see the module docstring)."""

    def __init__(
        self,
        meter: Meter,
        name: str,
        *,
        unit: str,
        description: str,
        zero: Iterable[Labels] = (),
    ) -> None:
        """``zero``: label sets reported at 0 from the start, so the first event a process counts
        is an increase Prometheus sees (a series that appears at 1 reads ``increase() = 0``)."""
        self._totals: dict[Labels, int] = dict.fromkeys(zero, 0)
        self._lock = threading.Lock()
        meter.create_observable_counter(
            name, callbacks=[self._observe], unit=unit, description=description
        )

    def add(self, value: int, labels: Labels) -> None:
        with self._lock:
            self._totals[labels] = self._totals.get(labels, 0) + value

    def _observe(self, _options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            items = list(self._totals.items())
        return [Observation(value, dict(labels)) for labels, value in items]

    def value(self, **labels: str | int) -> int:
        """The sum of the totals whose labels include ``labels`` (for tests and the page)."""
        wanted = set(labels.items())
        with self._lock:
            return sum(v for k, v in self._totals.items() if wanted <= set(k))
