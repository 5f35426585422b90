"""The reference domains served over HTTP: the drift a harness drives through the admin API."""

from fastapi.testclient import TestClient

from invalidation_contracts.domains import get_catalog
from invalidation_contracts.server.http.app import create_app

ADMIN = {"Authorization": "Bearer secret"}


def test_a_rotation_pushed_through_the_admin_api_makes_the_served_fix_change():
    catalog = get_catalog("acme_billing")
    client = TestClient(create_app(catalog.domain, admin_token="secret"))
    draft = catalog.family("governed-partner-growth").draft()
    before = client.post(catalog.route.path, json=draft)
    assert (
        before.status_code == 422 and before.headers["content-type"] == "application/problem+json"
    )
    (old,) = before.json()["recovery_feedback"]["suggestions"]
    snapshot = catalog.read_snapshot("active_csm_codes.rotation-1")
    reload = client.post(
        "/admin/reload-table", json={"table": snapshot.table, "rows": snapshot.rows}, headers=ADMIN
    )
    assert reload.status_code == 200 and reload.json()["diff"]["changed"] == ["plan_partner_growth"]
    stale = client.post(catalog.route.path, json={**draft, **old["parameters"]})
    assert stale.status_code == 422
    (new,) = stale.json()["recovery_feedback"]["suggestions"]
    assert new["parameters"] == {"promo_code": "WINTERLAUNCH26"}
    fixed = client.post(catalog.route.path, json={**draft, **new["parameters"]})
    assert fixed.status_code == 200 and fixed.json()["result"]["plan"] == "plan_partner_growth"


def test_a_rule_set_pushed_through_the_admin_api_creates_the_new_constraint():
    catalog = get_catalog("acme_rules")
    client = TestClient(create_app(catalog.domain, admin_token="secret"))
    draft = catalog.family("promo-ineligible-starter").draft()
    assert client.post(catalog.route.path, json=draft).status_code == 200
    rules = [r.to_declaration().to_wire() for r in catalog.read_rule_set("rule-addition")]
    assert client.post("/admin/rules", json={"rules": rules}, headers=ADMIN).status_code == 200
    refused = client.post(catalog.route.path, json=draft)
    assert refused.status_code == 422
    (fix,) = refused.json()["recovery_feedback"]["suggestions"]
    assert fix["type"] == "REMOVE_INELIGIBLE_PROMO_CODE"
