"""Every error is a problem document with a stable type; bad input changes nothing."""

from __future__ import annotations

import asyncio
import json

import httpx
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


# -- the reliability audit's inputs (D1, D2, D3, D8): each a 4xx problem document, never a 500


def raw_request(app, method, path, headers, content=b""):
    """Send header bytes exactly as given (TestClient re-encodes them as UTF-8; curl does not)."""

    async def send():
        transport = httpx.ASGITransport(app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://shop.test") as http:
            return await http.request(method, path, headers=headers, content=content)

    return asyncio.run(send())


@pytest.mark.parametrize(
    "since",
    [b"\xb2", b"1\xb9", b"9" * 5000, b"-1", b"null", b"9007199254740992", b"\xd9\xa3"],
    ids=["superscript", "digit-superscript", "5000-digits", "negative", "null", "2^53", "arabic"],
)
@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/nope"), ("GET", "/contract/versions"), ("POST", "/v1/orders"), ("GET", "/admin")],
)
def test_a_contract_since_that_is_not_a_seq_is_a_problem_on_any_route(client, since, method, path):
    headers = {"Contract-Since": since, "content-type": "application/json"}
    response = raw_request(client.app, method, path, headers, b'{"plan": "basic"}')
    assert 400 <= response.status_code < 500
    problem_type(response)
    assert "contract-since" not in response.headers


def test_a_malformed_contract_since_on_a_contract_route_is_an_invalid_request(client):
    response = raw_request(client.app, "GET", "/contract/versions", {"Contract-Since": b"\xb2"})
    assert response.status_code == 422
    assert problem_type(response) == "invalid-request"


@pytest.mark.parametrize("raw", [b'{"plan": ' + b"9" * 5000 + b"}", b"[" + b"1" * 4301 + b"]"])
def test_an_integer_with_thousands_of_digits_is_an_invalid_request(client, raw):
    response = client.post("/v1/orders", content=raw, headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert problem_type(response) == "invalid-request"


@pytest.mark.parametrize("length", [b"\xb2", b"9" * 5000, b"12345678901234567890123"])
def test_a_content_length_that_is_not_a_small_number_is_never_a_500(client, length):
    headers = {"content-type": "application/json", "content-length": length}
    response = raw_request(client.app, "POST", "/v1/orders", headers, b'{"plan": "basic"}')
    assert response.request.headers.get_list("content-length", split_commas=False) == [
        length.decode("latin-1")
    ]
    assert response.status_code < 500
    problem_type(response)


@pytest.mark.parametrize("version", ["1.\u00b2", "\u00b2", "1." + "9" * 5000, "9" * 129])
def test_a_reload_version_that_is_not_comparable_or_too_long_is_never_a_500(client, admin, version):
    response = client.post(
        "/admin/reload-table",
        headers=admin,
        json={"table": "plans", "rows": {"basic": {"funding": "wire"}}, "version": version},
    )
    assert response.status_code < 500
    problem_or_result = response.json()
    assert problem_or_result.get("type") != "urn:invalidation-contracts:problem:internal-error"


def test_a_version_past_the_length_limit_is_an_invalid_request_and_changes_nothing(client, admin):
    before = client.app.state.registry.state
    response = client.post(
        "/admin/reload-table",
        headers=admin,
        json={
            "table": "plans",
            "rows": {"basic": {"funding": "wire"}},
            "version": "1." + "9" * 5000,
        },
    )
    assert response.status_code == 422
    assert problem_type(response) == "invalid-request"
    assert client.app.state.registry.state is before


def test_a_negative_since_on_the_changes_feed_is_an_invalid_request(client):
    response = client.get("/contract/changes", params={"since": -1})
    assert response.status_code == 422
    assert problem_type(response) == "invalid-request"


def test_an_empty_rule_name_is_refused_by_the_published_schema_and_the_server(client, admin):
    schema = client.get("/openapi.json").json()["components"]["schemas"]["RuleDeclaration"]
    assert all(schema["properties"][name]["minLength"] == 1 for name in ("from_table", "to_table"))
    response = client.post(
        "/admin/rules",
        headers=admin,
        json={"rules": [{"from_table": "plans", "to_table": "", "relation": "r"}]},
    )
    assert response.status_code == 422


def test_optional_headers_and_query_parameters_are_not_published_as_nullable(client):
    document = client.get("/openapi.json").json()
    parameters = [
        parameter
        for operations in document["paths"].values()
        for operation in operations.values()
        for parameter in operation.get("parameters", [])
    ]
    assert {p["name"] for p in parameters} >= {"Contract-Since", "Contract-Epoch", "epoch"}
    assert not [p["name"] for p in parameters if "null" in json.dumps(p["schema"])]


def test_a_policy_reading_a_table_that_does_not_exist_is_a_500_problem_and_a_log_line(
    make_client, domain, caplog
):
    from dataclasses import replace

    from invalidation_contracts.server import policy

    @policy("promo_policy")
    def misspelt(request, tables):
        tables["plnas"].get(request["plan"])

    broken = replace(domain, routes=(replace(domain.routes[0], policies=(misspelt,)),))
    with caplog.at_level("ERROR", logger="invalidation_contracts.server.http.errors"):
        response = make_client(domain=broken).post("/v1/orders", json={"plan": "basic"})

    assert response.status_code == 500
    assert problem_type(response) == "internal-error"
    assert "plnas" not in response.text
    [record] = [r for r in caplog.records if r.name == "invalidation_contracts.server.http.errors"]
    assert record.getMessage() == (
        "POST /v1/orders: provider bug: policy 'promo_policy' reads table 'plnas', which the "
        "registry does not hold (tables: funding_types, plans)"
    )
