"""The operator page's routes: the admin token, escaping, the state document, the graph."""

from __future__ import annotations

import base64

import pytest
from fastapi.testclient import TestClient
from tests.service.conftest import TOKEN, make_domain

from invalidation_contracts.observe import instrument
from invalidation_contracts.server.http.app import create_app

BEARER = {"Authorization": f"Bearer {TOKEN}"}
PAGE = "/contract/operator"


@pytest.fixture
def client():
    app = create_app(make_domain(), admin_token=TOKEN)
    instrument(app, app.state.service)
    with TestClient(app) as c:
        yield c


@pytest.mark.parametrize("path", [PAGE, PAGE + "/state"])
def test_without_a_token_the_page_is_a_401_problem_asking_for_basic_auth(client, path):
    reply = client.get(path)
    assert reply.status_code == 401
    assert reply.headers["content-type"] == "application/problem+json"
    assert reply.headers["www-authenticate"].startswith('Basic realm="invalidation-contracts')


@pytest.mark.parametrize(
    "header",
    [
        "Bearer wrong",
        "Basic " + base64.b64encode(b"operator:wrong").decode(),
        "Basic !!!not-base64",
    ],
)
def test_a_wrong_token_is_a_403_or_401_problem(client, header):
    reply = client.get(PAGE, headers={"Authorization": header})
    assert reply.status_code in (401, 403)
    assert reply.headers["content-type"] == "application/problem+json"


def test_the_token_as_a_basic_password_opens_the_page(client):
    basic = base64.b64encode(f"anyone:{TOKEN}".encode()).decode()
    reply = client.get(PAGE, headers={"Authorization": f"Basic {basic}"})
    assert reply.status_code == 200 and "<h1>Contract operator</h1>" in reply.text
    assert "script-src 'self'" in reply.headers["content-security-policy"]


def test_the_state_document_lists_versions_changes_and_the_worker(client):
    rows = {"basic": {"funding": "invoice"}}
    client.post("/admin/patch-table", json={"table": "plans", "upsert": rows}, headers=BEARER)
    state = client.get(PAGE + "/state", headers=BEARER).json()
    assert state["seq"] == 1
    assert {t["table"]: t["version"] for t in state["tables"]}["plans"] != "1.0.0"
    (change,) = state["changes"]
    (move,) = change["tables"]
    assert move["rows"] == [
        {"key": "basic", "op": "changed", "old": {"funding": "card"}, "new": {"funding": "invoice"}}
    ]
    assert state["worker"]["available"] is True
    assert (state["worker"]["ready"], state["worker"]["live"]) == (True, True)


def test_row_values_are_escaped_in_the_page(client):
    hostile = {"basic": {"funding": "card", "note": "<script>alert(1)</script>"}}
    client.post("/admin/patch-table", json={"table": "plans", "upsert": hostile}, headers=BEARER)
    page = client.get(PAGE, headers=BEARER).text
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_the_graph_shows_a_nodes_edges_both_ways(client):
    state = client.get(PAGE + "/state?node=plans:basic", headers=BEARER).json()
    assert state["graph"]["exists"] is True
    assert state["graph"]["out"] == [{"to": "funding_types:card", "relation": "requires_funding"}]
    inbound = client.get(PAGE + "/state?node=funding_types:card", headers=BEARER).json()
    assert {e["from"] for e in inbound["graph"]["in"]} == {"plans:basic", "plans:starter"}


def test_an_unknown_node_is_said_so_not_an_error(client):
    state = client.get(PAGE + "/state?node=plans:nope", headers=BEARER).json()
    assert state["graph"]["exists"] is False


def test_the_clients_panel_shows_hashed_keys_only(client):
    client.post("/v1/orders", json={"plan": "basic"}, headers={"Authorization": "Bearer agent-1"})
    clients = client.get(PAGE + "/state", headers=BEARER).json()["clients"]
    assert [c["episodes"] for c in clients] == [1]
    assert "agent-1" not in clients[0]["client"]


def test_the_script_is_served_without_the_token(client):
    reply = client.get(PAGE + "/operator.js")
    assert reply.status_code == 200 and "textContent" in reply.text
