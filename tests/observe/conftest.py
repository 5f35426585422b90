"""Fixtures for the instrumentation tests: the SDK with in-memory readers, instrumented apps."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tests.service.conftest import TOKEN, make_domain

from invalidation_contracts.observe import instrument
from invalidation_contracts.server.http.app import create_app

ADMIN = {"Authorization": f"Bearer {TOKEN}"}
ORDERS = "/v1/orders"


class Readings:
    """An in-memory metric reader and span exporter, and what they hold."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))

    def points(self, name: str) -> list[Any]:
        """Every data point of metric ``name`` now (empty when it never recorded)."""
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found

    def value(self, name: str, **attributes: Any) -> float:
        """The sum of the points of ``name`` whose attributes include ``attributes``."""
        total = 0.0
        for point in self.points(name):
            if all(point.attributes.get(k) == v for k, v in attributes.items()):
                total += getattr(point, "value", None) or getattr(point, "sum", 0)
        return total


@pytest.fixture
def readings() -> Iterator[Readings]:
    found = Readings()
    yield found
    found.meter_provider.shutdown()
    found.tracer_provider.shutdown()


@pytest.fixture
def observed_client(readings: Readings) -> Iterator[Callable[..., TestClient]]:
    """``observed_client(**create_app options)``: an instrumented app read by ``readings``."""
    clients: list[TestClient] = []

    def build(**options: Any) -> TestClient:
        options.setdefault("admin_token", TOKEN)
        app = create_app(options.pop("domain", None) or make_domain(), **options)
        instrument(
            app,
            app.state.service,
            prometheus=False,
            meter_provider=readings.meter_provider,
            tracer_provider=readings.tracer_provider,
        )
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return client

    yield build
    for client in reversed(clients):
        client.__exit__(None, None, None)
