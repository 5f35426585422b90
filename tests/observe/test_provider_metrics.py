"""Provider instrumentation read through the OpenTelemetry SDK's in-memory reader."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from tests.observe.conftest import ADMIN, ORDERS
from tests.service.conftest import make_domain

from invalidation_contracts.server.http.app import create_app

ENTERPRISE = {"plan": "enterprise", "funding_type": "card", "promo_code": "ENT10"}


def test_a_422_is_counted_by_route_and_suggestion_type(observed_client, readings):
    client = observed_client()
    assert client.post(ORDERS, json=ENTERPRISE).status_code == 422
    assert client.post(ORDERS, json={"plan": "enterprise"}).status_code == 422
    refusals = "invalidation_contracts.http.refusals"
    assert readings.value(refusals, **{"suggestion.type": "USE_REQUIRED_FUNDING_TYPE"}) == 2
    assert readings.value(refusals, **{"suggestion.type": "ADD_REQUIRED_PROMO_CODE"}) == 1
    assert {p.attributes["http.route"] for p in readings.points(refusals)} == {ORDERS}


def test_answers_are_counted_by_status_with_their_contract_bytes(observed_client, readings):
    client = observed_client()
    passed = client.post(ORDERS, json={"plan": "basic", "funding_type": "card"})
    refused = client.post(ORDERS, json=ENTERPRISE)
    invalid = client.post(ORDERS, json={"plan": ""})
    assert (passed.status_code, refused.status_code, invalid.status_code) == (200, 422, 422)
    responses = "invalidation_contracts.http.responses"
    assert readings.value(responses, **{"http.status_code": 200}) == 1
    assert readings.value(responses, **{"http.status_code": 422}) == 2
    success = readings.value(
        "invalidation_contracts.http.contract_bytes", **{"http.status_code": 200}
    )
    body = passed.json()
    envelope = ("table_versions", "rules_version", "contract_seq", "contract_epoch")
    assert success > sum(len(str(body[k])) for k in envelope)


def test_render_cache_hits_are_counted(observed_client, readings):
    client = observed_client()
    for _ in range(3):
        client.post(ORDERS, json=ENTERPRISE)
    assert readings.value("invalidation_contracts.render_cache.misses") == 1
    assert readings.value("invalidation_contracts.render_cache.hits") == 2


def test_an_admin_reload_counts_a_change_of_that_table_with_admin_origin(observed_client, readings):
    client = observed_client()
    rows = {"basic": {"funding": "invoice"}, "starter": {"funding": "card"}}
    reply = client.post("/admin/reload-table", json={"table": "plans", "rows": rows}, headers=ADMIN)
    assert reply.status_code == 200
    changes = "invalidation_contracts.contract.changes"
    assert readings.value(changes, table="plans", origin="admin") == 1
    assert readings.value(changes, table="funding_types") == 0
    # basic changed, enterprise removed
    assert readings.value("invalidation_contracts.contract.rows_changed", table="plans") == 2


def test_the_journal_keeps_the_row_diff_with_old_and_new_values(observed_client):
    client = observed_client()
    rows = {"basic": {"funding": "invoice"}, "starter": {"funding": "card"}}
    client.post("/admin/reload-table", json={"table": "plans", "rows": rows}, headers=ADMIN)
    journal = client.app.state.observability.telemetry.journal
    (change,) = journal.recent()
    (move,) = change.tables
    assert (change.origin, change.seq, move.table) == ("admin", 1, "plans")
    by_key = {row.key: row for row in move.rows}
    assert by_key["basic"].op == "changed"
    assert by_key["basic"].old == {"funding": "card"}
    assert by_key["basic"].new == {"funding": "invoice"}
    assert by_key["enterprise"].op == "removed" and by_key["enterprise"].new is None


def test_policy_evaluation_spans_carry_the_position(observed_client, readings):
    client = observed_client()
    client.post(ORDERS, json=ENTERPRISE)
    seq = client.get("/contract/versions").json()["contract_seq"]
    epoch = client.get("/contract/versions").json()["contract_epoch"]
    (span,) = [
        s
        for s in readings.spans.get_finished_spans()
        if s.name == "invalidation_contracts.policy_evaluation"
    ]
    assert span.attributes["contract.epoch"] == epoch
    assert span.attributes["contract.seq"] == seq
    assert span.attributes["http.route"] == ORDERS


@pytest.mark.parametrize("header", ["00-{trace}-{parent}-01", "not a traceparent"])
def test_an_incoming_traceparent_makes_the_policy_span_its_child(observed_client, readings, header):
    trace, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    traceparent = header.format(trace=trace, parent=parent)
    observed_client().post(ORDERS, json=ENTERPRISE, headers={"traceparent": traceparent})
    (span,) = [
        s
        for s in readings.spans.get_finished_spans()
        if s.name == "invalidation_contracts.policy_evaluation"
    ]
    if traceparent.startswith("00-"):
        assert span.context.trace_id == int(trace, 16)
        assert span.parent is not None and span.parent.span_id == int(parent, 16)
        assert span.parent.is_remote
    else:  # a malformed header is ignored: a root span, the request answered as always
        assert span.parent is None


def test_worker_gauges_report_position_and_availability(observed_client, readings):
    client = observed_client()
    epoch = client.get("/contract/versions").json()["contract_epoch"]
    (seq,) = readings.points("invalidation_contracts.worker.seq")
    assert seq.value == 0 and seq.attributes["contract.epoch"] == epoch
    assert readings.value("invalidation_contracts.worker.available") == 1
    assert readings.value("invalidation_contracts.worker.ready") == 1
    assert readings.value("invalidation_contracts.worker.live") == 1
    (lag,) = readings.points("invalidation_contracts.worker.confirmation_age")
    assert lag.value == 0  # nothing else writes an in-memory registry


def test_a_failing_hook_never_fails_the_request_and_is_counted(observed_client, readings):
    client = observed_client()

    def broken(*_args):
        raise RuntimeError("an exporter bug")

    client.app.state.observability.telemetry.check_hooks.append(broken)
    assert client.post(ORDERS, json=ENTERPRISE).status_code == 422
    assert client.post(ORDERS, json={"plan": "basic", "funding_type": "card"}).status_code == 200
    assert readings.value("invalidation_contracts.telemetry.dropped") == 2


def test_an_uninstrumented_provider_has_no_telemetry():
    app = create_app(make_domain())
    with TestClient(app) as client:
        assert app.state.service.provider.telemetry is None
        assert client.post(ORDERS, json=ENTERPRISE).status_code == 422
    assert not hasattr(app.state, "observability")


def test_closing_the_observability_detaches_it(observed_client, readings):
    client = observed_client()
    client.app.state.observability.close()
    client.post(ORDERS, json=ENTERPRISE)
    assert client.app.state.service.provider.telemetry is None
    assert readings.value("invalidation_contracts.http.refusals") == 0


def test_answer_counts_stay_exact_across_collections_and_a_full_document_table(readings):
    from invalidation_contracts.observe.answers import AnswerCounters
    from invalidation_contracts.server import Provider

    domain = make_domain()
    provider = Provider(domain)
    route = domain.routes[0]
    counters = AnswerCounters(readings.meter_provider.get_meter("answers-test"), capacity=1)
    drafts = [ENTERPRISE, {"plan": "enterprise"}]
    refusals = [provider.handle(route, draft) for draft in drafts]
    assert [r.status for r in refusals] == [422, 422]
    sent = [0, 1, 0, 0, 1, 0]  # two documents through a table of one: every switch drops one
    for i, which in enumerate(sent):
        counters.refused(route, refusals[which])
        if i == 2:
            readings.reader.get_metrics_data()  # a collection in between folds the counts
    responses = counters.totals("responses")
    assert sum(responses.values()) == len(sent)
    types = counters.totals("refusals")
    per_type = {dict(labels)["suggestion.type"]: n for labels, n in types.items()}
    assert per_type == {"USE_REQUIRED_FUNDING_TYPE": 6, "ADD_REQUIRED_PROMO_CODE": 2}
    sizes = counters.totals("contract_bytes")
    each = [counters.contract_bytes(r.content) for r in refusals]
    assert sum(sizes.values()) == 4 * each[0] + 2 * each[1] > 0
