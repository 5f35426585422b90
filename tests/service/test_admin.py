"""Admin routes: reload, patch and rules; bearer auth; bad input leaves the registry unchanged."""

from __future__ import annotations

import pytest

from invalidation_contracts.protocol.problems import PROBLEM_BASE


def kind(response) -> str:
    assert response.headers["content-type"] == "application/problem+json"
    return response.json()["type"].removeprefix(PROBLEM_BASE)


def test_reload_returns_diff_and_downstream_from_the_graph_before(client, admin):
    response = client.post(
        "/admin/reload-table",
        headers=admin,
        json={
            "table": "funding_types",
            "rows": {"card": {"label": "Debit card"}, "invoice": {"label": "Invoice"}},
        },
    )
    assert response.status_code == 200
    body = response.json()
    assert body["old_version"] == "2.0.0" and body["new_version"] == "2.1.0"
    assert body["diff"] == {"added": [], "removed": ["wire"], "changed": ["card"]}
    assert body["contract_seq"] == 1
    rows = {
        **client.app.state.registry.state.tables["plans"].plain_rows(),
        "basic": {"funding": "invoice"},
    }
    plans = client.post(
        "/admin/reload-table", headers=admin, json={"table": "plans", "rows": rows}
    ).json()
    assert plans["diff"]["changed"] == ["basic"]
    assert plans["affected_downstream"] == ["funding_types:card"]


def test_identical_rows_under_a_new_version_are_a_touch(client, admin):
    rows = client.app.state.registry.state.tables["plans"].plain_rows()
    body = client.post(
        "/admin/reload-table",
        headers=admin,
        json={"table": "plans", "rows": rows, "version": "1.0.1"},
    ).json()
    assert body["touch"] is True
    assert body["new_version"] == "1.0.1"
    assert body["diff"] == {"added": [], "removed": [], "changed": []}


def test_identical_rows_without_a_version_change_nothing(client, admin):
    rows = client.app.state.registry.state.tables["plans"].plain_rows()
    body = client.post(
        "/admin/reload-table", headers=admin, json={"table": "plans", "rows": rows}
    ).json()
    assert body["old_version"] == body["new_version"] == "1.0.0"
    assert body["contract_seq"] == 0


def test_patch_upserts_and_deletes_rows(client, admin):
    response = client.post(
        "/admin/patch-table",
        headers=admin,
        json={"table": "plans", "upsert": {"pro": {"funding": "wire"}}, "delete": ["starter"]},
    )
    assert response.status_code == 200
    assert response.json()["diff"] == {"added": ["pro"], "removed": ["starter"], "changed": []}
    rows = client.app.state.registry.state.tables["plans"].rows
    assert set(rows) == {"basic", "enterprise", "pro"}


def test_set_rules_returns_old_and_new_rules_version(client, admin):
    old = client.get("/contract/rules").json()["rules_version"]
    response = client.post(
        "/admin/rules",
        headers=admin,
        json={
            "rules": [
                {
                    "from_table": "plans",
                    "to_table": "funding_types",
                    "relation": "pays_with",
                    "via": "funding",
                }
            ]
        },
    )
    assert response.status_code == 200
    body = response.json()
    assert body["old_rules_version"] == old != body["new_rules_version"]
    assert body["added"] == [["plans", "funding_types", "pays_with"]]
    assert body["removed"] == [["plans", "funding_types", "requires_funding"]]
    assert (
        client.post("/v1/orders", json={"plan": "basic", "funding_type": "card"}).json()[
            "rules_version"
        ]
        == (body["new_rules_version"])
    )


BAD_INPUT = [
    ("/admin/reload-table", {"table": "nope", "rows": {}}, 404, "unknown-table"),
    (
        "/admin/reload-table",
        {"table": "plans", "rows": {"basic": ["not", "an", "object"]}},
        422,
        "invalid-request",
    ),
    (
        "/admin/reload-table",
        {"table": "plans", "rows": {"": {"funding": "card"}}},
        422,
        "invalid-request",
    ),
    ("/admin/reload-table", {"table": "plans", "rows": []}, 422, "invalid-request"),
    ("/admin/reload-table", {"rows": {}}, 422, "invalid-request"),
    (
        "/admin/reload-table",
        {"table": "plans", "rows": {}, "version": "0.9.0"},
        409,
        "version-conflict",
    ),
    (
        "/admin/reload-table",
        {"table": "plans", "rows": {}, "version": "1.0.0"},
        409,
        "version-conflict",
    ),
    ("/admin/patch-table", {"table": "plans", "delete": ["ghost"]}, 422, "invalid-request"),
    (
        "/admin/patch-table",
        {"table": "plans", "upsert": {"basic": {}}, "delete": ["basic"]},
        422,
        "invalid-request",
    ),
    ("/admin/patch-table", {"table": "ghost", "upsert": {"a": {}}}, 404, "unknown-table"),
    (
        "/admin/rules",
        {"rules": [{"from_table": "plans", "to_table": "ghost", "relation": "r"}]},
        422,
        "invalid-rules",
    ),
    (
        "/admin/rules",
        {"rules": [{"from_table": "plans", "to_table": "", "relation": "r"}]},
        422,
        "invalid-request",
    ),
    ("/admin/rules", {"rules": "all of them"}, 422, "invalid-request"),
]


@pytest.mark.parametrize(("path", "body", "status", "problem"), BAD_INPUT)
def test_bad_admin_input_is_a_problem_and_changes_nothing(
    client, admin, path, body, status, problem
):
    before = client.app.state.registry.state
    response = client.post(path, headers=admin, json=body)
    assert response.status_code == status
    assert kind(response) == problem
    assert client.app.state.registry.state is before
    assert client.get("/contract/changes", params={"since": 0}).json()["last_seq"] == 0


def test_admin_without_a_token_is_401_with_www_authenticate(client):
    response = client.post("/admin/reload-table", json={"table": "plans", "rows": {}})
    assert response.status_code == 401
    assert kind(response) == "unauthorized"
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_admin_with_a_non_bearer_scheme_is_401(client):
    response = client.post(
        "/admin/rules", json={"rules": []}, headers={"Authorization": "Basic dXNlcjpwdw=="}
    )
    assert response.status_code == 401


def test_admin_with_the_wrong_token_is_403(client):
    before = client.app.state.registry.state
    response = client.post(
        "/admin/reload-table",
        json={"table": "plans", "rows": {}},
        headers={"Authorization": "Bearer wrong"},
    )
    assert response.status_code == 403
    assert kind(response) == "forbidden"
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert client.app.state.registry.state is before


def test_auth_is_checked_before_the_body_is_read(client):
    response = client.post(
        "/admin/reload-table", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 401


def test_without_a_configured_token_admin_routes_say_so(make_client, monkeypatch, admin):
    monkeypatch.delenv("INVALIDATION_CONTRACTS_ADMIN_TOKEN", raising=False)
    client = make_client(admin_token=None)
    response = client.post("/admin/rules", json={"rules": []}, headers=admin)
    assert response.status_code == 401
    assert "no admin token" in response.json()["detail"]


def test_the_admin_token_defaults_to_the_environment(make_client, monkeypatch):
    monkeypatch.setenv("INVALIDATION_CONTRACTS_ADMIN_TOKEN", "from-env")
    client = make_client(admin_token=None)
    response = client.post(
        "/admin/rules", json={"rules": []}, headers={"Authorization": "Bearer from-env"}
    )
    assert response.status_code == 200
