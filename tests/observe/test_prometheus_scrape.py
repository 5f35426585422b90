"""The Prometheus exposition, scraped for real over 127.0.0.1 from a uvicorn server."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from prometheus_client.parser import text_string_to_metric_families
from tests.observe.conftest import ADMIN, ORDERS
from tests.service.conftest import TOKEN, make_domain, running
from tests.support.acme_sqlite import acme_on_sqlite

from invalidation_contracts.observe import instrument
from invalidation_contracts.server.http.app import create_app

ENTERPRISE = {"plan": "enterprise", "funding_type": "card"}


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a Prometheus text exposition, by name and labels."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float:
    return sum(
        v
        for (n, found), v in samples(text).items()
        if n == name and set(labels.items()) <= set(found)
    )


def instrumented_app(**options):
    app = create_app(options.pop("domain", None) or make_domain(), admin_token=TOKEN, **options)
    instrument(app, app.state.service)
    return app


def test_the_metrics_route_is_scraped_over_loopback_in_prometheus_format():
    with running(instrumented_app()) as url:
        assert httpx.post(url + ORDERS, json=ENTERPRISE).status_code == 422
        scrape = httpx.get(url + "/contract/metrics", headers=ADMIN)
    assert scrape.status_code == 200
    assert scrape.headers["content-type"].startswith("text/plain")
    refusals = "invalidation_contracts_http_refusals_total"
    assert value(scrape.text, refusals, suggestion_type="USE_REQUIRED_FUNDING_TYPE") == 1
    assert value(scrape.text, "invalidation_contracts_worker_available") == 1


@pytest.mark.parametrize(
    ("headers", "status", "problem"),
    [({}, 401, "unauthorized"), ({"Authorization": "Bearer wrong"}, 403, "forbidden")],
)
def test_the_metrics_route_without_the_admin_token_is_a_problem(headers, status, problem):
    with running(instrumented_app()) as url:
        reply = httpx.get(url + "/contract/metrics", headers=headers)
    assert reply.status_code == status
    assert reply.headers["content-type"] == "application/problem+json"
    assert reply.json()["type"].endswith(problem)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_metrics_backend_that_is_down_never_fails_a_request():
    dead = f"http://127.0.0.1:{closed_port()}"
    meters = MeterProvider(
        metric_readers=[
            PeriodicExportingMetricReader(
                OTLPMetricExporter(endpoint=dead + "/v1/metrics", timeout=1),
                export_interval_millis=50,
            )
        ]
    )
    tracers = TracerProvider()
    tracers.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=dead + "/v1/traces", timeout=1))
    )
    app = create_app(make_domain(), admin_token=TOKEN)
    instrument(
        app, app.state.service, prometheus=False, meter_provider=meters, tracer_provider=tracers
    )
    try:
        with running(app) as url, httpx.Client(base_url=url) as client:
            statuses = [client.post(ORDERS, json=ENTERPRISE).status_code for _ in range(50)]
    finally:
        meters.shutdown(timeout_millis=2000)
        tracers.shutdown()
    assert statuses == [422] * 50


def test_a_plain_sql_write_from_another_process_is_a_captured_change(tmp_path: Path):
    app, database = acme_on_sqlite(tmp_path, admin_token=TOKEN)
    instrument(app, app.state.service)
    update = "UPDATE active_csm_codes SET code = 'WINTERLAUNCH26' WHERE key = 'plan_partner_growth'"
    code = (
        "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
        "db.execute(sys.argv[2]); db.commit()"
    )
    with running(app) as url:
        subprocess.run([sys.executable, "-c", code, str(database), update], check=True, timeout=60)
        deadline = time.monotonic() + 30
        while True:
            scrape = httpx.get(url + "/contract/metrics", headers=ADMIN).text
            name = "invalidation_contracts_contract_changes_total"
            if value(scrape, name, table="active_csm_codes", origin="captured") == 1:
                break
            assert time.monotonic() < deadline, "the captured change was never counted"
            time.sleep(0.05)
    assert value(scrape, "invalidation_contracts_contract_rows_changed_total") == 1
    assert value(scrape, "invalidation_contracts_worker_ready") == 1
    assert 0 <= value(scrape, "invalidation_contracts_worker_confirmation_age_seconds") < 10


@pytest.mark.workers
def test_serve_with_two_workers_and_metrics_answers_every_scrape_from_some_worker(tmp_path):
    from tests.support.processes import serving

    args = ["--domain", "acme_billing", "--db", str(tmp_path / "r.sqlite"), "--workers", "2"]
    env = {"INVALIDATION_CONTRACTS_ADMIN_TOKEN": TOKEN}
    with serving([*args, "--metrics"], tmp_path / "logs", env=env) as url:
        workers = set()
        for _ in range(20):
            scrape = httpx.get(url + "/contract/metrics", headers=ADMIN)
            assert scrape.status_code == 200
            for (name, labels), _v in samples(scrape.text).items():
                if name == "invalidation_contracts_worker_seq":
                    workers.add(dict(labels)["worker"])
    assert workers  # each scrape names the worker that answered it


DOCS = Path(__file__).parents[2] / "docs" / "operators.md"


def _documented_names() -> set[str]:
    """Every metric name docs/operators.md lists in its tables and queries."""
    return set(re.findall(r"invalidation_contracts_[a-z_]+[a-z]", DOCS.read_text("utf-8")))


def test_every_metric_name_the_operators_page_lists_is_served_from_the_first_request():
    with running(instrumented_app()) as url:
        assert httpx.post(url + ORDERS, json=ENTERPRISE).status_code == 422
        scrape = httpx.get(url + "/contract/metrics", headers=ADMIN).text
    served = {name for name, _ in samples(scrape)}

    assert len(_documented_names()) >= 18
    assert _documented_names() - served == set()  # the lag histogram too, at 0 (issue 42)


def test_change_counters_are_exported_at_zero_before_the_first_change():
    """A series that appears at 1 reads ``increase() = 0``: the first change of a process would
    be invisible (issue 42)."""
    with running(instrumented_app()) as url:
        scrape = httpx.get(url + "/contract/metrics", headers=ADMIN).text
    found = samples(scrape)

    changes = {
        dict(labels)["origin"]: v
        for (name, labels), v in found.items()
        if name == "invalidation_contracts_contract_changes_total"
        and dict(labels)["table"] == "plans"
    }
    assert changes == {"captured": 0, "admin": 0, "reconciled": 0, "direct": 0}
    assert value(scrape, "invalidation_contracts_telemetry_dropped_total") == 0
    assert ("invalidation_contracts_telemetry_dropped_total", frozenset()) not in found


def test_the_lag_histogram_and_each_route_s_answers_are_exported_at_zero_then_count_on(tmp_path):
    """The lag histogram (the SDK exports it only from its first record) starts as a zero series
    with the labels the exporter gives it later, so the first change set is an increase."""
    app = instrumented_app(store=str(tmp_path / "history.sqlite"))
    with running(app) as url:
        before = httpx.get(url + "/contract/metrics", headers=ADMIN).text
        app.state.service.registry.patch("plans", {"gold": {"funding": "card"}})
        after = httpx.get(url + "/contract/metrics", headers=ADMIN).text
    lag = "invalidation_contracts_worker_lag_seconds_count"
    durations = "invalidation_contracts_http_server_duration_seconds_count"

    for status in ("200", "422"):
        for name in ("invalidation_contracts_http_responses_total", durations):
            found = [
                v
                for (n, ls), v in samples(before).items()
                if n == name and {("http_route", ORDERS), ("http_status_code", status)} <= ls
            ]
            assert found == [0.0], (name, status)
    assert [v for (n, _), v in samples(before).items() if n == lag] == [0.0]
    series = [(n, labels) for (n, labels) in samples(after) if n == lag]
    assert len(series) == 1 and series == [(n, ls) for (n, ls) in samples(before) if n == lag]
    assert value(after, lag) == 1


def test_request_durations_are_a_histogram_by_route_and_status_beside_process_metrics():
    with running(instrumented_app()) as url:
        for _ in range(3):
            assert httpx.post(url + ORDERS, json=ENTERPRISE).status_code == 422
        httpx.get(url + "/no/such/path")
        scrape = httpx.get(url + "/contract/metrics", headers=ADMIN).text
    name = "invalidation_contracts_http_server_duration_seconds"
    families = {f.name: f for f in text_string_to_metric_families(scrape)}

    assert families[name].type == "histogram"
    assert value(scrape, name + "_count", http_route=ORDERS, http_status_code="422") == 3
    assert value(scrape, name + "_bucket", http_route=ORDERS, le="+Inf") == 3
    assert 0 < value(scrape, name + "_sum", http_route=ORDERS) < 30
    assert value(scrape, name + "_count", http_route="other", http_status_code="404") == 1
    assert value(scrape, "process_cpu_seconds_total") > 0
    assert value(scrape, "process_open_fds") > 0
