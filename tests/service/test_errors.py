"""Every error is a problem document with a stable type; bad input changes nothing."""

from __future__ import annotations

import json

import pytest

from invalidation_contracts.protocol.problems import PROBLEM_BASE

PROBLEM = "application/problem+json"


def problem_type(response) -> str:
    assert response.headers["content-type"] == PROBLEM
    body = response.json()
    assert body["status"] == response.status_code
    assert body["success"] is False
    return body["type"].removeprefix(PROBLEM_BASE)


def test_malformed_json_is_400(client):
    response = client.post(
        "/v1/orders", content=b'{"plan": ', headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert problem_type(response) == "malformed-json"
    assert "table_versions" in response.json()


@pytest.mark.parametrize("raw", [b'{"plan": NaN}', b'{"plan": "a", "plan": "b"}', b"\xff\xfe", b""])
def test_not_json_is_malformed(client, raw):
    response = client.post("/v1/orders", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert problem_type(response) == "malformed-json"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"plan": 9007199254740993}',
        b'{"plan": 1e400}',
        b'{"plan": "\\ud800"}',
        b"[" * 100 + b"]" * 100,
    ],
)
def test_json_canonical_json_cannot_carry_is_an_invalid_request(client, raw):
    response = client.post("/v1/orders", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert problem_type(response) == "invalid-request"


def test_json_too_deep_to_parse_is_malformed_not_a_crash(client):
    raw = b"[" * 100_000 + b"]" * 100_000
    response = client.post("/v1/orders", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert problem_type(response) == "malformed-json"


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_a_body_that_is_not_json_is_415(client, content_type):
    headers = {"content-type": content_type} if content_type else {}
    response = client.post("/v1/orders", content=b'{"plan": "basic"}', headers=headers)
    assert response.status_code == 415
    assert problem_type(response) == "unsupported-media-type"


def test_json_with_charset_and_vendor_suffix_is_accepted(client):
    for content_type in ("application/json; charset=utf-8", "application/vnd.shop+json"):
        response = client.post(
            "/v1/orders",
            content=b'{"plan": "basic", "funding_type": "card"}',
            headers={"content-type": content_type},
        )
        assert response.status_code == 200


def test_declared_oversized_body_is_413(make_client):
    client = make_client(max_body_bytes=64)
    response = client.post("/v1/orders", json={"plan": "basic", "promo_code": "x" * 100})
    assert response.status_code == 413
    assert problem_type(response) == "payload-too-large"


def test_streamed_oversized_body_is_413(make_client):
    client = make_client(max_body_bytes=64)
    chunks = iter([b'{"plan": "basic", ', b'"promo_code": "' + b"x" * 100 + b'"}'])
    response = client.post(
        "/v1/orders", content=chunks, headers={"content-type": "application/json"}
    )
    assert "content-length" not in {k.lower() for k in response.request.headers}
    assert response.status_code == 413
    assert problem_type(response) == "payload-too-large"


def test_oversized_reload_changes_nothing(make_client, admin):
    client = make_client(max_body_bytes=128)
    before = client.app.state.registry.state
    rows = {f"k{i}": {"funding": "card"} for i in range(50)}
    response = client.post(
        "/admin/reload-table", headers=admin, json={"table": "plans", "rows": rows}
    )
    assert response.status_code == 413
    assert client.app.state.registry.state is before


def test_unknown_route_is_404(client):
    response = client.get("/v2/nothing")
    assert response.status_code == 404
    assert problem_type(response) == "not-found"
    assert response.json()["instance"] == "/v2/nothing"


def test_wrong_method_is_405_with_allow(client):
    response = client.get("/v1/orders")
    assert response.status_code == 405
    assert problem_type(response) == "method-not-allowed"
    assert response.headers["allow"] == "POST"


def test_internal_error_is_a_problem_without_a_stack_trace(make_client, domain):
    from dataclasses import replace

    def explode(order, state):
        raise RuntimeError("secret internals")

    broken = replace(domain, routes=(replace(domain.routes[0], on_success=explode),))
    response = make_client(domain=broken).post(
        "/v1/orders", json={"plan": "basic", "funding_type": "card"}
    )
    assert response.status_code == 500
    assert problem_type(response) == "internal-error"
    assert "secret" not in response.text and "Traceback" not in response.text
    assert "table_versions" in response.json()


def test_problem_documents_are_valid_rfc9457(client):
    body = client.post(
        "/v1/orders", content=b"{", headers={"content-type": "application/json"}
    ).json()
    assert {"type", "title", "status", "detail", "instance"} <= set(body)
    assert json.dumps(body)
