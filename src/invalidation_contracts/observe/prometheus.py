"""A Prometheus exposition of the telemetry: the official OpenTelemetry reader on its own registry.

``PrometheusExposition`` owns a ``MeterProvider`` whose only reader is the OpenTelemetry
Prometheus reader, registered in a ``prometheus_client`` registry of its own (never the process
global one, so several services in one process do not mix). ``render`` is what the metrics route
answers. Pull-based: a Prometheus server that is down or slow only misses scrapes; nothing is
queued or sent on a request's path. Beside the reader, the registry holds the request-duration
histogram (``observe.latency``) and the standard ``process_*`` metrics (CPU seconds, resident
memory, open and maximum file descriptors, start time) of ``prometheus_client``'s collector.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .._extras import missing

try:
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader
    from opentelemetry.sdk.resources import Resource
    from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
    from prometheus_client.exposition import CONTENT_TYPE_LATEST
except ModuleNotFoundError as exc:
    raise missing(exc, "otel") from exc

from .latency import RequestDurations
from .workers import WorkerFiles

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The Prometheus text exposition format's media type."""


class PrometheusExposition:
    """A meter provider read by Prometheus scrapes (see the module docstring)."""

    def __init__(
        self,
        service_name: str = "invalidation-contracts",
        *,
        shared_dir: Path | None = None,
        readers: Sequence[MetricReader] = (),
        resource: Resource | None = None,
    ) -> None:
        """``shared_dir``: a folder the workers of one ``serve --workers N`` share; ``render``
        then answers every worker's metrics, each series labelled with its ``worker``
        (``observe.workers``). ``readers``: more readers of the same meter provider (e.g. the
        OTLP exporter's, ``observe.otlp``); ``resource``: the meter provider's (default: the
        service's name; ``OtlpPipeline.resource`` adds the worker's ``service.instance.id``)."""
        self.registry = CollectorRegistry(auto_describe=True)
        self.durations = RequestDurations()
        """Request seconds by route and status, measured by ``latency.TimedRequests``."""
        self.registry.register(self.durations)
        ProcessCollector(registry=self.registry)
        self.reader = PrometheusMetricReader(registry=self.registry)
        self.meter_provider = MeterProvider(
            metric_readers=[self.reader, *readers],
            resource=resource or Resource.create({"service.name": service_name}),
        )
        self.workers: WorkerFiles | None = None
        if shared_dir is not None:
            self.workers = WorkerFiles(shared_dir, self.render_own)
            self.workers.start()

    def render_own(self) -> bytes:
        """This process's metrics in the Prometheus text format."""
        return generate_latest(self.registry)

    def render(self) -> bytes:
        """The current metrics in the Prometheus text format (every worker's, when shared)."""
        return self.render_own() if self.workers is None else self.workers.render()

    def shutdown(self) -> None:
        if self.workers is not None:
            self.workers.stop()
        self.meter_provider.shutdown()
