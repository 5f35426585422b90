"""The contract added to an existing FastAPI app: chosen routes gain the policy check and the
response-level fields; the contract and admin routes mount under a prefix; the app's own exception
handlers, OpenAPI and other routes are untouched."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from tests.service.conftest import TOKEN, Order

from invalidation_contracts.protocol.problems import PROBLEM_BASE
from invalidation_contracts.server import Domain
from invalidation_contracts.server.http import STATE_ATTRIBUTE, ContractService

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "retrofit_app.py"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}


class Shop:
    """An existing app with its own error format; the contract added with its public pieces."""

    def __init__(self, domain: Domain) -> None:
        self.service = ContractService.open(domain, admin_token=TOKEN)
        self.placed: list[str] = []
        app = FastAPI(title="Existing shop", lifespan=self.service.lifespan)

        @app.exception_handler(RequestValidationError)
        async def own_validation(request: Request, exc: RequestValidationError) -> JSONResponse:
            return JSONResponse({"shop_error": "bad input"}, status_code=400)

        @app.get("/health")
        async def health() -> dict[str, str]:
            return {"status": "ok"}

        app.include_router(self.service.contract_router(), prefix="/api")
        app.include_router(self.service.admin_router(), prefix="/api")
        orders = self.service.router()

        @orders.post("/v1/orders")
        async def place(order: Order, request: Request) -> dict[str, Any]:
            self.placed.append(order.plan)
            state = getattr(request.state, STATE_ATTRIBUTE)
            return {"order": "accepted", "plan": order.plan, "checked_at": state.seq}

        @orders.get("/v1/catalogue")
        async def catalogue() -> list[str]:
            return ["basic", "enterprise"]

        @orders.get("/v1/hello")
        async def hello() -> dict[str, str]:
            return {"hello": "world"}

        app.include_router(orders)
        self.app = app


@pytest.fixture
def shop(domain: Domain) -> Shop:
    return Shop(domain)


@pytest.fixture
def http(shop: Shop) -> Iterator[TestClient]:
    with TestClient(shop.app, raise_server_exceptions=False) as client:
        yield client


def test_a_policy_violation_is_a_422_problem_and_the_endpoint_does_not_run(
    shop: Shop, http: TestClient
) -> None:
    answer = http.post("/v1/orders", json={"plan": "enterprise", "promo_code": "ENT10"})
    assert answer.status_code == 422
    assert answer.headers["content-type"] == "application/problem+json"
    body = answer.json()
    assert body["type"] == PROBLEM_BASE + "policy-violation"
    [suggestion] = body["recovery_feedback"]["suggestions"]
    assert suggestion["parameters"] == {"funding_type": "invoice"}
    assert body["table_versions"] == {"funding_types": "2.0.0", "plans": "1.0.0"}
    assert shop.placed == []


def test_a_passing_request_runs_the_endpoint_and_its_body_gains_the_contract_fields(
    shop: Shop, http: TestClient
) -> None:
    answer = http.post(
        "/v1/orders", json={"plan": "enterprise", "promo_code": "ENT10", "funding_type": "invoice"}
    )
    assert answer.status_code == 200
    body = answer.json()
    assert {k: body[k] for k in ("order", "plan", "checked_at")} == {
        "order": "accepted",
        "plan": "enterprise",
        "checked_at": 0,
    }
    assert body["table_versions"] == {"funding_types": "2.0.0", "plans": "1.0.0"}
    assert body["contract_seq"] == 0 and len(body["rules_version"]) == 12
    assert int(answer.headers["content-length"]) == len(answer.content)
    assert shop.placed == ["enterprise"]


def test_the_conditional_contract_works_on_the_apps_routes(http: TestClient) -> None:
    answer = http.post(
        "/v1/orders",
        json={"plan": "basic", "funding_type": "card"},
        headers={"Contract-Since": "0"},
    )
    assert answer.headers["Contract-Since"] == "0"
    assert "table_versions" not in answer.json()


def test_a_route_the_domain_does_not_declare_is_stamped_but_not_checked(http: TestClient) -> None:
    assert http.get("/v1/hello").json()["contract_seq"] == 0


def test_a_body_that_is_not_a_json_object_is_left_as_it_is(http: TestClient) -> None:
    assert http.get("/v1/catalogue").json() == ["basic", "enterprise"]


def test_the_apps_other_routes_are_untouched(http: TestClient) -> None:
    assert http.get("/health").json() == {"status": "ok"}


def test_an_invalid_body_is_left_to_the_apps_own_handler(shop: Shop, http: TestClient) -> None:
    answer = http.post("/v1/orders", json={"plan": "basic", "quantity": 0})
    assert (answer.status_code, answer.json()) == (400, {"shop_error": "bad input"})
    assert shop.placed == []


def test_the_contract_routes_mount_under_the_prefix_and_answer_problem_documents(
    http: TestClient,
) -> None:
    assert http.get("/api/contract/versions").json()["contract_seq"] == 0
    refused = http.get("/api/contract/changes", params={"since": -1})
    assert refused.status_code == 422, "the contract's own answer, not the app's handler"
    assert refused.json()["type"] == PROBLEM_BASE + "invalid-request"
    gone = http.get("/api/contract/changes", params={"since": 5})
    assert gone.status_code == 410
    assert http.get("/contract/versions").status_code == 404


def test_an_admin_reload_through_the_prefix_moves_the_stamps_of_the_apps_routes(
    http: TestClient,
) -> None:
    unauthorised = http.post("/api/admin/patch-table", json={"table": "plans", "upsert": {}})
    assert unauthorised.status_code == 401
    patch = http.post(
        "/api/admin/patch-table",
        headers=ADMIN,
        json={"table": "plans", "upsert": {"basic": {"funding": "wire"}}},
    )
    assert patch.json()["new_version"] == "1.1.0"
    answer = http.post("/v1/orders", json={"plan": "basic", "funding_type": "card"})
    assert answer.status_code == 422
    assert answer.json()["recovery_feedback"]["suggestions"][0]["parameters"] == {
        "funding_type": "wire"
    }


def test_the_apps_openapi_keeps_its_own_and_every_reference_resolves(http: TestClient) -> None:
    document = http.get("/openapi.json").json()
    assert document["info"]["title"] == "Existing shop"
    assert {"/health", "/v1/orders", "/api/contract/changes", "/api/admin/rules"} <= set(
        document["paths"]
    )
    schemas = document["components"]["schemas"]
    refs = {
        ref.rsplit("/", 1)[1] for ref in _refs(document) if ref.startswith("#/components/schemas/")
    }
    assert refs <= set(schemas), sorted(refs - set(schemas))


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def test_the_retrofit_example_runs() -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "own route: {'status': 'ok'}"
    assert lines[1].startswith(
        "first try: 422 USE_REQUIRED_FUNDING_TYPE {'funding_type': 'invoice'}"
    )
    assert lines[2] == "with the fix: 200 accepted {'plans': '1.0.0'}"
    assert lines[3] == "own error handler: 409 {'error': 'out of stock', 'plan': 'retired'}"
    assert lines[4] == "after an UPDATE: {'plans': '1.1.0'} [('enterprise', 'changed')]"
    assert lines[5] == "the cached fix now: 422 [{'funding_type': 'wire'}]"
    paths = json.loads(lines[6].split(": ", 1)[1].replace("'", '"'))
    assert "/health" in paths and "/api/contract/versions" in paths
