"""How a retrofitted route answers (SPEC §3 on an app's own routes): the body the endpoint made,
re-encoded as compact JSON with the contract fields merged in, every header it set kept; the
request body parsed once for the policy check and the endpoint; a refusal names the request's
path."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.testclient import TestClient
from starlette.types import Receive, Scope, Send
from tests.service.conftest import TOKEN

from invalidation_contracts.server import Domain
from invalidation_contracts.server.http import ContractService

PASSING = {"plan": "basic", "funding_type": "card"}
SPELT = b'{"ratio": 1E20, "name": "Zo\\u00eb", "tags": [ ]}'  # the endpoint's own spelling
CONTRACT_FIELDS = ("table_versions", "rules_version", "contract_seq", "contract_epoch")


class SelfSending(JSONResponse):
    """A response class that sends itself its own way (here: as a plain response would)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await super().__call__(scope, receive, send)


@pytest.fixture
def http(domain: Domain) -> Iterator[TestClient]:
    service = ContractService.open(domain, admin_token=TOKEN)
    app = FastAPI(lifespan=service.lifespan)
    app.include_router(service.contract_router(), prefix="/api")
    shop = service.router()

    @shop.post("/v1/orders")
    async def place(request: Request) -> Any:
        return {"received": await request.json()}

    @shop.get("/v1/profile")
    async def profile() -> JSONResponse:
        answer = JSONResponse({"name": "Zoë", "ratio": 1e20, "tags": ["a", "b"]})
        answer.headers["X-Shop"] = "kept"  # reads the headers before the contract stamps them
        answer.set_cookie("session", "s1")
        return answer

    @shop.get("/v1/spelt")
    async def spelt() -> Response:
        return Response(SPELT, media_type="application/json")

    @shop.get("/v1/self-sending")
    async def self_sending() -> SelfSending:
        return SelfSending({"kind": "own class"}, headers={"X-Shop": "kept"})

    app.include_router(shop)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def contract_of(http: TestClient) -> dict[str, Any]:
    versions = http.get("/api/contract/versions").json()
    return {name: versions[name] for name in CONTRACT_FIELDS}


def test_the_stamped_body_is_the_endpoints_object_with_the_contract_fields_compactly_encoded(
    http: TestClient,
) -> None:
    answer = http.get("/v1/profile")
    expected = {"name": "Zoë", "ratio": 1e20, "tags": ["a", "b"], **contract_of(http)}
    encoded = json.dumps(expected, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    assert answer.content == encoded


def test_the_endpoints_own_bytes_are_kept_and_the_fields_added_before_its_closing_brace(
    http: TestClient,
) -> None:
    answer = http.get("/v1/spelt")
    assert answer.content.startswith(SPELT[:-1] + b',"table_versions":')
    assert answer.json() == {**json.loads(SPELT), **contract_of(http)}


def test_every_header_the_endpoint_set_is_kept_beside_one_content_length_and_the_link(
    http: TestClient,
) -> None:
    answer = http.get("/v1/profile")
    assert answer.headers["x-shop"] == "kept"
    assert answer.cookies["session"] == "s1"
    assert answer.headers.get_list("content-length") == [str(len(answer.content))]
    assert answer.headers.get_list("link") == [
        '</api/contract>; rel="urn:invalidation-contracts:contract"'
    ]


def test_a_response_class_that_sends_itself_is_stamped_and_keeps_its_headers(
    http: TestClient,
) -> None:
    answer = http.get("/v1/self-sending")
    assert answer.json() == {"kind": "own class", **contract_of(http)}
    assert answer.headers["x-shop"] == "kept"
    assert answer.headers.get_list("content-length") == [str(len(answer.content))]
    assert len(answer.headers.get_list("link")) == 1


def test_the_endpoint_reads_the_very_json_the_client_sent_not_the_checked_model(
    http: TestClient,
) -> None:
    answer = http.post("/v1/orders", json=PASSING)
    assert answer.status_code == 200
    assert answer.json()["received"] == PASSING, "no defaults of the domain's model added"


def test_a_body_the_strict_parse_refuses_still_reaches_the_endpoint_as_json_loads_reads_it(
    http: TestClient,
) -> None:
    duplicated = b'{"plan": "basic", "plan": "basic", "funding_type": "card"}'
    answer = http.post(
        "/v1/orders", content=duplicated, headers={"content-type": "application/json"}
    )
    assert answer.status_code == 200
    assert answer.json()["received"] == PASSING


def test_a_refusal_names_the_requests_path_as_its_instance(http: TestClient) -> None:
    answer = http.post("/v1/orders", json={"plan": "enterprise"})
    assert answer.status_code == 422
    assert answer.json()["instance"] == "/v1/orders"


def test_answers_in_a_row_at_different_positions_each_carry_their_own_fields(
    http: TestClient,
) -> None:
    epoch = contract_of(http)["contract_epoch"]
    known = {"Contract-Since": "0", "Contract-Epoch": epoch}
    positions = [{}, {"Contract-Since": "0"}, {}, known, {"Contract-Since": "0"}, known]
    bodies = [http.get("/v1/self-sending", headers=h).json() for h in positions]
    every, moved = sorted(CONTRACT_FIELDS), ["contract_epoch"]  # nothing moved since seq 0
    assert [sorted(set(CONTRACT_FIELDS) & set(body)) for body in bodies] == [
        every,
        moved,
        every,
        [],
        moved,
        [],
    ]
