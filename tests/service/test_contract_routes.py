"""GET /contract/versions, /changes, /graph, /rules, by level; and the OpenAPI document."""

from __future__ import annotations

import pytest

from invalidation_contracts.protocol.models import ChangesFeed, GraphListing, RulesListing
from invalidation_contracts.protocol.problems import PROBLEM_BASE


def reload(client, admin, table, rows, version=None):
    body = {"table": table, "rows": rows, **({"version": version} if version else {})}
    response = client.post("/admin/reload-table", headers=admin, json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_versions_are_the_response_level_fields(client):
    body = client.get("/contract/versions").json()
    state = client.app.state.registry.state
    assert body == {
        "table_versions": {"funding_types": "2.0.0", "plans": "1.0.0"},
        "rules_version": state.rules.version,
        "contract_seq": 0,
        "contract_epoch": state.epoch,
    }


def test_versions_honour_contract_since(client, admin):
    reload(client, admin, "plans", {"basic": {"funding": "card"}})
    response = client.get("/contract/versions", headers={"Contract-Since": "1"})
    assert "table_versions" not in response.json()
    assert response.headers["Contract-Since"] == "1"


def test_versions_leave_out_the_epoch_the_client_names(client, admin):
    epoch = client.get("/contract/versions").json()["contract_epoch"]
    known = client.get(
        "/contract/versions", headers={"Contract-Since": "0", "Contract-Epoch": epoch}
    )
    other = client.get("/contract/versions", headers={"Contract-Since": "0", "Contract-Epoch": "x"})
    assert "contract_epoch" not in known.json() and other.json()["contract_epoch"] == epoch


def test_changes_lists_rows_transitions_and_rules_after_since(client, admin):
    reload(client, admin, "plans", {"basic": {"funding": "card"}, "gold": {"funding": "wire"}})
    client.post("/admin/rules", headers=admin, json={"rules": []})
    feed = ChangesFeed.model_validate(client.get("/contract/changes", params={"since": 0}).json())
    assert feed.last_seq == 2
    assert [(r.key, r.op) for r in feed.rows] == [
        ("gold", "added"),
        ("enterprise", "removed"),
        ("starter", "removed"),
    ]
    assert [t.table for t in feed.tables] == ["plans"]
    assert [r.seq for r in feed.rules] == [2]
    later = client.get("/contract/changes", params={"since": 1}).json()
    assert later["rows"] == [] and len(later["rules"]) == 1


def test_changes_filters_by_tables(client, admin):
    reload(client, admin, "plans", {"basic": {"funding": "card"}})
    reload(client, admin, "funding_types", {"card": {"label": "Card"}})
    feed = client.get("/contract/changes", params={"since": 0, "tables": "funding_types"}).json()
    assert [t["table"] for t in feed["tables"]] == ["funding_types"]
    assert {r["table"] for r in feed["rows"]} == {"funding_types"}


def test_changes_for_an_unknown_table_is_404(client):
    response = client.get("/contract/changes", params={"since": 0, "tables": "plans,ghost"})
    assert response.status_code == 404
    assert response.json()["type"] == PROBLEM_BASE + "unknown-table"


@pytest.mark.parametrize("params", [{"since": 7}, {"since": 0, "epoch": "someone-else"}])
def test_changes_outside_this_history_is_410_resync_required(client, params):
    response = client.get("/contract/changes", params=params)
    assert response.status_code == 410
    body = response.json()
    assert body["type"] == PROBLEM_BASE + "resync-required"
    assert body["table_versions"] == {"funding_types": "2.0.0", "plans": "1.0.0"}


def test_changes_older_than_the_retained_log_is_410(make_client, admin):
    client = make_client(log_capacity=2)
    for i in range(4):
        reload(client, admin, "plans", {"basic": {"funding": "card", "n": i}})
    assert client.get("/contract/changes", params={"since": 1}).status_code == 410
    assert client.get("/contract/changes", params={"since": 2}).json()["last_seq"] == 4


@pytest.mark.parametrize("params", [{}, {"since": "x"}, {"since": -1}])
def test_changes_needs_a_non_negative_since(client, params):
    response = client.get("/contract/changes", params=params)
    assert response.status_code == 422
    assert response.json()["type"] == PROBLEM_BASE + "invalid-request"


def test_graph_lists_nodes_and_edges_at_level_5(make_client):
    listing = GraphListing.model_validate(make_client(level=5).get("/contract/graph").json())
    assert listing.nodes["plans:basic"].version == "1.0.0"
    assert {(e.from_, e.to) for e in listing.edges} == {
        ("plans:basic", "funding_types:card"),
        ("plans:enterprise", "funding_types:invoice"),
        ("plans:starter", "funding_types:card"),
    }


@pytest.mark.parametrize("level", [0, 1, 4])
def test_graph_below_level_5_is_404_level_too_low(make_client, level):
    client = make_client(level=level)
    response = client.get("/contract/graph")
    assert response.status_code == 404
    assert response.json()["type"] == PROBLEM_BASE + "level-too-low"
    assert "/contract/graph" not in client.get("/openapi.json").json()["paths"]


def test_graph_can_be_put_behind_the_admin_token(make_client, admin):
    client = make_client(protect_graph=True)
    assert client.get("/contract/graph").status_code == 401
    assert (
        client.get("/contract/graph", headers={"Authorization": "Bearer nope"}).status_code == 403
    )
    assert client.get("/contract/graph", headers=admin).status_code == 200


def test_rules_lists_the_declarations(client):
    listing = RulesListing.model_validate(client.get("/contract/rules").json())
    assert [(r.from_table, r.to_table, r.relation, r.via) for r in listing.rules] == [
        ("plans", "funding_types", "requires_funding", "funding")
    ]


@pytest.mark.parametrize(
    "path", ["/contract/versions", "/contract/changes?since=0", "/contract/rules"]
)
def test_contract_routes_need_level_1(make_client, path):
    response = make_client(level=0).get(path)
    assert response.status_code == 404
    assert response.json()["type"] == PROBLEM_BASE + "level-too-low"


def test_openapi_documents_every_route_and_the_request_schemas(client):
    document = client.get("/openapi.json").json()
    assert set(document["paths"]) == {
        "/v1/orders",
        "/resources/{table}",
        "/resources/{table}/{key}",
        "/admin/reload-table",
        "/admin/patch-table",
        "/admin/change-set",
        "/admin/quarantine",
        "/admin/rules",
        "/contract/versions",
        "/contract/changes",
        "/contract/graph",
        "/contract/rules",
        "/contract/live",
        "/contract/ready",
        "/contract/watch",
    }
    order = document["paths"]["/v1/orders"]["post"]
    assert order["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Order"
    }
    assert set(document["components"]["schemas"]["Order"]["properties"]) == {
        "plan",
        "funding_type",
        "promo_code",
        "quantity",
    }
    assert order["responses"]["422"]["content"]["application/problem+json"]["schema"] == {
        "$ref": "#/components/schemas/Problem"
    }
    assert document["paths"]["/admin/rules"]["post"]["security"] == [{"HTTPBearer": []}]


@pytest.fixture
def lagging_pair(domain, admin, tmp_path):
    """Two workers on one SQLite history that never follow it by themselves (no lifespan): the
    first has taken a rules change (seq 1), the second has not seen it."""
    from fastapi.testclient import TestClient
    from tests.service.conftest import TOKEN

    from invalidation_contracts.server.http.app import create_app

    store = tmp_path / "registry.sqlite"
    first, second = (
        # never started, each vouches for its state for max_lag_s after it opened it
        TestClient(create_app(domain, store=store, admin_token=TOKEN, max_lag_s=60))
        for _ in range(2)
    )
    rule = {"from_table": "plans", "to_table": "funding_types", "relation": "pays_with"}
    assert first.post("/admin/rules", headers=admin, json={"rules": [rule]}).status_code == 200
    assert second.get("/contract/changes", params={"since": 0}).json()["last_seq"] == 0, "lags"
    return first, second


@pytest.mark.parametrize("path", ["/contract/changes?since=0", "/contract/rules"])
def test_a_worker_behind_the_clients_position_catches_up_before_answering(lagging_pair, path):
    first, second = lagging_pair
    answer = second.get(path, headers={"Contract-Since": "1"})
    assert answer.status_code == 200
    assert answer.json() == first.get(path).json()
