"""Request durations as a Prometheus histogram, counted in plain integers on the request path.

``RequestDurations`` keeps, per route template and status code, the bucket counts, the sum and
the count of the seconds each HTTP request took (from its arrival to the end of its response);
``observe`` is one bisect and three additions under a lock. It is a ``prometheus_client``
collector: ``PrometheusExposition`` registers it beside the OpenTelemetry reader, so
``invalidation_contracts_http_server_duration_seconds`` is in the scrape (and merged across
workers like the rest) while no SDK code runs per request (an OpenTelemetry histogram records
through the SDK, tens of microseconds; it has no observable form). ``TimedRequests`` is the pure
ASGI middleware that measures. A request matched by no route is labelled ``http_route="other"``
so unknown paths cannot grow the label set.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from .._extras import missing

try:  # loaded on demand, as the exposition is: it guards its own import
    from prometheus_client.core import HistogramMetricFamily
except ModuleNotFoundError as exc:
    raise missing(exc, "otel") from exc

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

NAME = "invalidation_contracts_http_server_duration_seconds"
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds in seconds (a ``+Inf`` bucket follows)."""
OTHER = "other"


class RequestDurations:
    """Bucket counts, sum and count of request seconds by route and status (a collector)."""

    def __init__(self, buckets: tuple[float, ...] = BUCKETS) -> None:
        self.buckets = buckets
        self._lock = threading.Lock()
        self._series: dict[tuple[str, str], tuple[list[int], list[float]]] = {}

    def zero(self, routes: Iterable[str], statuses: Iterable[int]) -> None:
        """Report each route with each status at 0 from the start (a series that appears at
        its first request reads ``increase() = 0`` in Prometheus)."""
        with self._lock:
            for route in routes:
                for status in statuses:
                    self._series.setdefault(
                        (route, str(status)), ([0] * (len(self.buckets) + 1), [0.0])
                    )

    def observe(self, route: str, status: int, seconds: float) -> None:
        """Count one request of ``route`` answered ``status`` that took ``seconds``."""
        index = bisect.bisect_left(self.buckets, seconds)
        key = (route, str(status))
        with self._lock:
            found = self._series.get(key)
            if found is None:
                found = self._series[key] = ([0] * (len(self.buckets) + 1), [0.0])
            found[0][index] += 1
            found[1][0] += seconds

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(
            NAME,
            "Seconds from a request's arrival to the end of its response, by route and status.",
            labels=["http_route", "http_status_code"],
        )
        with self._lock:
            series = [(k, list(v[0]), v[1][0]) for k, v in self._series.items()]
        for labels, counts, total in sorted(series):
            cumulative, running = [], 0
            for bound, count in zip((*self.buckets, float("inf")), counts, strict=True):
                running += count
                cumulative.append((_bound(bound), running))
            family.add_metric(list(labels), cumulative, total)
        yield family


class UntilRecorded:
    """A collector: one OpenTelemetry histogram's series at 0 (every bucket, its sum and count)
    until the histogram's first record, so Prometheus sees the first observation as an increase
    (the SDK exports a histogram only from its first record and has no form that starts at 0).
    ``labels`` are the ones the OpenTelemetry exporter writes for the series (its scope's
    included), so the series is the same one before and after."""

    def __init__(
        self, name: str, documentation: str, buckets: Iterable[float], labels: Mapping[str, str]
    ) -> None:
        self.name, self.documentation = name, documentation
        self.buckets, self.labels = tuple(buckets), dict(labels)
        self.recorded = False

    def describe(self) -> list[HistogramMetricFamily]:
        """No names claimed: the exporter's own family takes this name after the first record."""
        return []

    def collect(self) -> Iterator[HistogramMetricFamily]:
        if self.recorded:
            return
        family = HistogramMetricFamily(self.name, self.documentation, labels=list(self.labels))
        family.add_metric(
            list(self.labels.values()),
            [(_bound(b), 0) for b in (*self.buckets, float("inf"))],
            0.0,
        )
        yield family


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


class TimedRequests:
    """Pure ASGI middleware: each HTTP request's duration into ``durations``."""

    def __init__(self, app: ASGIApp, durations: RequestDurations) -> None:
        self.app = app
        self.durations = durations

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route: object = scope.get("route")
            path = getattr(route, "path", None)
            self.durations.observe(
                path if isinstance(path, str) else OTHER, status[0], time.perf_counter() - start
            )
