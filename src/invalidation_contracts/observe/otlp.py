"""``serve --otlp URL``: the contract's metrics and spans pushed over OTLP/HTTP (protobuf).

``OtlpPipeline`` owns a meter provider whose reader exports every ``OTEL_METRIC_EXPORT_INTERVAL``
ms (the SDK's default: 60 s) to ``URL/v1/metrics``, and a tracer provider whose batch processor
exports to ``URL/v1/traces`` (``OTEL_BSP_*`` tune it). Both run on the SDK's background threads
with bounded queues: a collector that is down never slows a request, its data is dropped. The
resource names the service and the worker process (``service.instance.id``: the pid, the
Prometheus ``worker`` label's value), so the series of ``serve --workers N`` stay apart; with
``--metrics`` too, the exposition's meter provider takes this resource. ``shutdown`` (also at
interpreter exit) flushes both, bounded.
"""

from __future__ import annotations

import atexit
import os
import threading
from urllib.parse import urlsplit

from .._extras import missing

try:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
except ModuleNotFoundError as exc:
    raise missing(exc, "otlp") from exc

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

SHUTDOWN_MS = 2_000
"""How long a shutdown waits for the last metrics export."""


def check_otlp_url(url: str) -> str:
    """``url`` without a trailing slash if it is an ``http(s)://host[:port][/path]`` base URL,
    else ``ValueError`` saying what is wrong."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"expected an http(s)://HOST:PORT URL of an OTLP/HTTP receiver, not {url!r}"
        )
    if parts.query or parts.fragment:
        raise ValueError(f"the OTLP URL {url!r} must not carry a query or a fragment")
    return url.rstrip("/")


class OtlpPipeline:
    """A meter provider and a tracer provider exporting to one OTLP/HTTP receiver."""

    def __init__(self, url: str, service_name: str) -> None:
        base = check_otlp_url(url)
        self.resource = Resource.create(
            {"service.name": service_name, "service.instance.id": str(os.getpid())}
        )
        self.metric_reader: MetricReader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=base + "/v1/metrics")
        )
        self._meter_provider: MeterProvider | None = None
        self._span_exporter = OTLPSpanExporter(endpoint=base + "/v1/traces")
        self.tracer_provider = TracerProvider(resource=self.resource, shutdown_on_exit=False)
        self.tracer_provider.add_span_processor(BatchSpanProcessor(self._span_exporter))
        self._closed = False
        atexit.register(self.shutdown)  # bounded, unlike the SDK's own exit hook

    def meter_provider(self) -> MeterProvider:
        """The meter provider read by the OTLP exporter alone (without a Prometheus route; with
        one, ``PrometheusExposition(readers=[pipeline.metric_reader])`` owns the reader)."""
        if self._meter_provider is None:
            self._meter_provider = MeterProvider(
                metric_readers=[self.metric_reader], resource=self.resource, shutdown_on_exit=False
            )
        return self._meter_provider

    def shutdown(self) -> None:
        """Flush and stop both exporters within about ``SHUTDOWN_MS`` each (also at exit): a
        collector that is down would hold the span exporter in its retries for 10 s, so past the
        bound its retries are cut short and what it still holds is dropped."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.shutdown)
        if self._meter_provider is not None:
            self._meter_provider.shutdown(timeout_millis=SHUTDOWN_MS)
        flushing = threading.Thread(target=self.tracer_provider.shutdown, daemon=True)
        flushing.start()
        flushing.join(SHUTDOWN_MS / 1000)
        if flushing.is_alive():
            self._span_exporter.shutdown()  # type: ignore[no-untyped-call]  # cuts the retries
            flushing.join(SHUTDOWN_MS / 1000)
