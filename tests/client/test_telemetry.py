"""The fix memory's OpenTelemetry metrics, through the global meter provider.

The global provider can be set once per process: the first test that needs it sets an SDK
provider with an in-memory reader, and each test reads the figures of its own origin. Whether the
memory costs nothing without a provider is checked in a fresh interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from invalidation_contracts.client import FixMemory, Limits
from invalidation_contracts.client.telemetry import TOKEN_ESTIMATE

_READER: InMemoryMetricReader | None = None


@pytest.fixture
def reader() -> InMemoryMetricReader:
    global _READER
    if _READER is None:
        _READER = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[_READER]))
    return _READER


def value(reader: InMemoryMetricReader, name: str, **attributes: Any) -> float:
    data = reader.get_metrics_data()
    total = 0.0
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != f"invalidation_contracts.memory.{name}":
                    continue
                for point in metric.data.data_points:
                    if all(point.attributes.get(k) == v for k, v in attributes.items()):
                        total += point.value
    return total


@pytest.fixture
def origin(server, request) -> Any:
    """A server with an origin of its own, so the cumulative figures of one test are its own."""
    server.url = f"https://{request.node.name.replace('_', '-')[:50]}.example"
    return server


def test_lookups_hits_misses_and_stores_are_counted(reader, origin, standard_fixes, driver_class):
    memory = FixMemory("row")
    drive = driver_class(memory, origin)
    drive.fail(*standard_fixes(origin))
    memory.lookup(origin.url, {"plan": "plan_a"}, operation="")
    memory.lookup(origin.url, {"plan": "nope"}, operation="")
    where = {"origin": origin.url}
    assert value(reader, "stores", **where) == 3
    assert value(reader, "lookups", **where) == 2
    assert value(reader, "hits", **where) == 1
    assert value(reader, "misses", **where) == 1
    assert value(reader, "served", **where) >= 1


def test_injections_are_counted_from_the_requests_sent(
    reader, origin, standard_fixes, driver_class
):
    memory = FixMemory("row")
    drive = driver_class(memory, origin)
    drive.fail(*standard_fixes(origin))
    injected = [e.id for e in memory.lookup(origin.url, {"plan": "plan_a"}).entries]
    drive.ok({"plan": "plan_a"}, injected=injected)
    assert value(reader, "injected", origin=origin.url) == len(injected) > 0


def test_evictions_are_counted_by_reason(reader, origin, standard_fixes, driver_class):
    memory = FixMemory("row")
    drive = driver_class(memory, origin)
    drive.fail(*standard_fixes(origin))
    origin.update("codes", "plan_a", {"code": "AUTUMN"})
    drive.ok()
    assert value(reader, "evictions", origin=origin.url, reason="row-changed") == 1
    memory.evict(origin.url, everything=True)
    assert value(reader, "evictions", origin=origin.url, reason="operator") == 2


def test_restamps_are_counted(reader, origin, standard_fixes, driver_class):
    memory = FixMemory("row")
    drive = driver_class(memory, origin)
    drive.fail(*standard_fixes(origin))
    origin.update("codes", "plan_b", {"code": "WINTER"})  # plan_a's fix survives and is restamped
    drive.ok()
    assert value(reader, "restamps", origin=origin.url) >= 1


def test_refused_suggestions_are_counted_by_bound(reader, origin, standard_fixes, driver_class):
    memory = FixMemory("row", limits=Limits(max_suggestions=1))
    driver_class(memory, origin).fail(*standard_fixes(origin))
    assert value(reader, "refused", origin=origin.url, bound="max_suggestions") == 1


def test_contract_tokens_kept_from_the_model_are_a_labelled_estimate(
    reader, origin, standard_fixes, driver_class
):
    memory = FixMemory("row")
    driver_class(memory, origin).fail(*standard_fixes(origin))
    seen = value(reader, "contract_bytes", origin=origin.url)
    kept = value(reader, "contract_tokens_kept", origin=origin.url, estimate=TOKEN_ESTIMATE)
    assert seen > 0 and kept == seen // 4


def test_without_a_meter_provider_the_memory_never_imports_opentelemetry():
    code = textwrap.dedent(
        """
        import json, sys
        from invalidation_contracts.client import FixMemory, Observed
        memory = FixMemory("row")
        memory.lookup("https://a.example", {"plan": "x"})
        memory.observe("https://a.example", Observed(None, 200, {"success": True}))
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("opentelemetry"))))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []


def test_with_only_the_api_the_memory_records_nothing_and_builds_nothing():
    code = textwrap.dedent(
        """
        import json
        from opentelemetry import metrics
        from invalidation_contracts.client import FixMemory, telemetry
        memory = FixMemory("row")
        memory.lookup("https://a.example", {"plan": "x"})
        print(json.dumps(telemetry._built[1] is None))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) is True


def test_every_counter_of_a_call_reaches_its_own_instrument(reader):
    from invalidation_contracts.client import telemetry
    from invalidation_contracts.client.stats import OriginStats

    counted = {name: 10 + i for i, name in enumerate(telemetry._STATS)}
    telemetry.record("https://columns.example", OriginStats(**counted), ())
    telemetry.injected("https://columns.example", 7)
    expected = {**counted, "injected": 7, "contract_tokens_kept": counted["contract_bytes"] // 4}
    read = {name: value(reader, name, origin="https://columns.example") for name in expected}
    assert read == expected
