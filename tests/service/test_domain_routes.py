"""Domain routes: the contract fields on every response, per level, and the conditional contract."""

from __future__ import annotations

import pytest

from invalidation_contracts.protocol.levels import Level


def test_success_carries_the_full_contract_at_level_6(client):
    response = client.post("/v1/orders", json={"plan": "basic", "funding_type": "card"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    state = client.app.state.registry.state
    assert body["success"] is True
    assert body["result"] == {"order": "accepted", "plan": "basic"}
    assert body["table_versions"] == {"funding_types": "2.0.0", "plans": "1.0.0"}
    assert body["rules_version"] == state.rules.version
    assert body["contract_seq"] == 0
    assert body["contract_epoch"] == state.epoch


def test_policy_violation_is_a_problem_with_suggestions_and_contract(client):
    response = client.post("/v1/orders", json={"plan": "enterprise", "promo_code": "ENT10"})
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["type"] == "urn:invalidation-contracts:problem:policy-violation"
    assert body["instance"] == "/v1/orders"
    assert body["table_versions"] == {"funding_types": "2.0.0", "plans": "1.0.0"}
    [fix] = body["recovery_feedback"]["suggestions"]
    assert fix["type"] == "USE_REQUIRED_FUNDING_TYPE"
    assert fix["parameters"] == {"funding_type": "invoice"}
    assert fix["cache_hint"] == "cacheable"
    assert fix["tables"] == [
        {"table": "plans", "version": "1.0.0", "keys": ["enterprise"]},
        {"table": "funding_types", "version": "2.0.0", "keys": ["invoice"]},
    ]


def test_table_free_fix_is_recompute(client):
    body = client.post("/v1/orders", json={"plan": "nope", "quantity": 500}).json()
    [fix] = body["recovery_feedback"]["suggestions"]
    assert fix["type"] == "SPLIT_ORDER"
    assert fix["cache_hint"] == "recompute"
    assert "tables" not in fix


@pytest.mark.parametrize("level", list(Level))
def test_each_level_emits_exactly_its_response_fields(make_client, level):
    client = make_client(level=level)
    ok = client.post("/v1/orders", json={"plan": "basic", "funding_type": "card"}).json()
    fix = client.post("/v1/orders", json={"plan": "enterprise", "promo_code": "ENT10"}).json()
    contract = {"table_versions", "contract_seq", "contract_epoch"} if level >= 1 else set()
    if level >= 6:
        contract.add("rules_version")
    assert set(ok) - {"success", "result"} == contract
    assert {"table_versions", "rules_version", "contract_seq", "contract_epoch"} & set(
        fix
    ) == contract
    suggestions = fix.get("recovery_feedback", {}).get("suggestions", [])
    assert bool(suggestions) == (level >= 1 or level is Level.NONE)
    assert all(("tables" in s) == (level >= 4) for s in suggestions)
    assert all(("cache_hint" in s) == (level >= 1) for s in suggestions)


def test_level_none_sends_the_suggestion_and_no_contract_field(make_client):
    client = make_client(level="none")
    body = client.post("/v1/orders", json={"plan": "enterprise", "promo_code": "ENT10"}).json()
    [fix] = body["recovery_feedback"]["suggestions"]
    assert fix["parameters"] == {"funding_type": "invoice"}
    assert fix["scope"] and fix["patch"]
    assert not {"cache_hint", "table", "tables", "max_age_s", "rules"} & set(fix)
    assert not {"table_versions", "rules_version", "contract_seq", "contract_epoch"} & set(body)
    assert client.get("/contract/changes", params={"since": 0}).status_code >= 400


def test_conditional_contract_sends_only_tables_changed_after_since(client, admin):
    client.post(
        "/admin/reload-table",
        headers=admin,
        json={"table": "plans", "rows": {"basic": {"funding": "wire"}}},
    )
    response = client.post(
        "/v1/orders",
        json={"plan": "basic", "funding_type": "wire"},
        headers={"Contract-Since": "0"},
    )
    assert response.headers["Contract-Since"] == "0"
    assert response.json()["table_versions"] == {"plans": "1.1.0"}
    current = client.post(
        "/v1/orders",
        json={"plan": "basic", "funding_type": "wire"},
        headers={"Contract-Since": "1"},
    ).json()
    assert "table_versions" not in current and "contract_seq" not in current


def test_without_contract_since_the_full_dictionary_is_sent(client, admin):
    client.post(
        "/admin/reload-table",
        headers=admin,
        json={"table": "plans", "rows": {"basic": {"funding": "wire"}}},
    )
    response = client.post("/v1/orders", json={"plan": "basic", "funding_type": "wire"})
    assert "Contract-Since" not in response.headers
    assert response.json()["table_versions"] == {"funding_types": "2.0.0", "plans": "1.1.0"}


@pytest.mark.parametrize(
    "value", ["abc", "-1", "1.5", "+1", "1.0", "1e0", "1_0", str(2**53)]
)  # "+1", "1.0": reliability audit 2, N15 (SPEC §3.1: ASCII digits only)
def test_invalid_contract_since_is_an_invalid_request_problem(client, value):
    response = client.post("/v1/orders", json={"plan": "basic"}, headers={"Contract-Since": value})
    assert response.status_code == 422
    body = response.json()
    assert body["type"] == "urn:invalidation-contracts:problem:invalid-request"
    assert body["errors"][0]["loc"] == ["header", "Contract-Since"]
    assert body["table_versions"] == {"funding_types": "2.0.0", "plans": "1.0.0"}


@pytest.mark.parametrize("epoch", ["e p", "ep\u00e9".encode("latin-1"), "e" * 129], ids=str)
def test_a_contract_epoch_outside_visible_ascii_is_an_invalid_request_problem(client, epoch):
    headers = {"Contract-Since": "0", "Contract-Epoch": epoch}
    response = client.post("/v1/orders", json={"plan": "basic"}, headers=headers)
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"] == ["header", "Contract-Epoch"]


def test_schema_mismatch_on_a_domain_route_carries_the_contract(client):
    response = client.post("/v1/orders", json={"plan": "", "extra": 1})
    assert response.status_code == 422
    body = response.json()
    assert body["type"] == "urn:invalidation-contracts:problem:invalid-request"
    assert {tuple(e["loc"]) for e in body["errors"]} == {("plan",), ("extra",)}
    assert body["contract_seq"] == 0 and "table_versions" in body


def test_level_0_problems_carry_no_contract(make_client):
    body = make_client(level=0).post("/v1/orders", json={"plan": "enterprise"}).json()
    assert body["detail"].startswith("plan enterprise requires")
    assert not {"table_versions", "contract_seq", "recovery_feedback"} & set(body)


@pytest.mark.parametrize("amount", ["5000", True, 5000.0], ids=["string", "boolean", "float"])
def test_an_integer_field_takes_only_a_json_integer(make_client, amount):
    """Reliability audit 2, N15: the published schema says integer; SPEC §5: anything else is
    ``invalid-request``."""
    from invalidation_contracts.domains import get_domain

    client = make_client(domain=get_domain("acme_billing"))
    body = {
        "customer": "cus_vandelay",
        "plan": "plan_partner_growth",
        "payment_method_token": "acme_pm_visa_credit",
        "amount_cents": amount,
        "currency": "usd",
    }
    response = client.post("/v1/subscriptions", json=body)
    assert response.status_code == 422
    problem = response.json()
    assert problem["type"] == "urn:invalidation-contracts:problem:invalid-request"
    assert problem["errors"][0]["loc"][-1] == "amount_cents"
    body["amount_cents"] = 5000
    assert client.post("/v1/subscriptions", json=body).json()["type"] != problem["type"]
