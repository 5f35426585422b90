"""A retrofitted route checks what its endpoint receives (SPEC §3 on an app's own routes): the
model FastAPI validated for the endpoint, or the body as ``Request.json()`` reads it. A body
with a repeated name, of any size or of any media type cannot reach the endpoint unchecked."""

from __future__ import annotations

import importlib.util
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from fastapi import Body, Depends, FastAPI, Header, HTTPException, Request
from fastapi.exceptions import ResponseValidationError
from fastapi.testclient import TestClient
from tests.service.conftest import TOKEN, Order

from invalidation_contracts.server import Domain
from invalidation_contracts.server.http import ContractService
from invalidation_contracts.server.http.checked import model_parameters

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "retrofit_app.py"
JSON = {"content-type": "application/json"}
# basic is paid by card: the last of two funding types is the one the endpoint would read.
REPEATED = b'{"plan": "basic", "funding_type": "card", "funding_type": "invoice"}'
PASSING = {"plan": "basic", "funding_type": "card"}


def _async_model(router: Any, ran: list[str]) -> None:
    @router.post("/v1/orders")
    async def place(order: Order) -> dict[str, Any]:
        ran.append(order.plan)
        return {"order": "accepted", "funding": order.funding_type}


def _sync_model(router: Any, ran: list[str]) -> None:
    @router.post("/v1/orders")
    def place(order: Order) -> dict[str, Any]:
        ran.append(order.plan)
        return {"order": "accepted", "funding": order.funding_type}


def _embedded_model(router: Any, ran: list[str]) -> None:
    @router.post("/v1/orders")
    async def place(order: Annotated[Order, Body()]) -> dict[str, Any]:
        ran.append(order.plan)
        return {"order": "accepted", "funding": order.funding_type}


def _body_reader(router: Any, ran: list[str]) -> None:
    @router.post("/v1/orders")
    async def place(request: Request) -> dict[str, Any]:
        received = await request.json()
        ran.append(received["plan"])
        return {"order": "accepted", "funding": received.get("funding_type")}


ENDPOINTS: dict[str, Callable[[Any, list[str]], None]] = {
    "async endpoint taking the model": _async_model,
    "sync endpoint taking the model": _sync_model,
    "the model as an annotated body": _embedded_model,
    "endpoint reading the body itself": _body_reader,
}


class Shop:
    """An app whose one retrofitted endpoint is of the kind asked for."""

    def __init__(self, domain: Domain, kind: str, **options: Any) -> None:
        self.ran: list[str] = []
        self.service = ContractService.open(domain, admin_token=TOKEN, **options)
        self.app = FastAPI(lifespan=self.service.lifespan)
        self.app.include_router(self.service.contract_router(), prefix="/api")
        router = self.service.router()
        ENDPOINTS[kind](router, self.ran)
        self.app.include_router(router)


@pytest.fixture(params=sorted(ENDPOINTS))
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def shop(domain: Domain, kind: str) -> Shop:
    return Shop(domain, kind, max_body_bytes=256)


@pytest.fixture
def http(shop: Shop) -> Iterator[TestClient]:
    with TestClient(shop.app, raise_server_exceptions=False) as client:
        yield client


def test_a_passing_order_runs_the_endpoint_and_is_stamped(shop: Shop, http: TestClient) -> None:
    answer = http.post("/v1/orders", json=PASSING)
    assert answer.status_code == 200
    assert answer.json()["funding"] == "card"
    assert "contract_seq" in answer.json()
    assert shop.ran == ["basic"]


def test_a_violating_order_is_refused_and_the_endpoint_does_not_run(
    shop: Shop, http: TestClient
) -> None:
    answer = http.post("/v1/orders", json={"plan": "basic", "funding_type": "invoice"})
    assert answer.status_code == 422
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["type"].endswith("policy-violation")
    assert answer.json()["instance"] == "/v1/orders"
    assert len(answer.headers.get_list("link")) == 1
    assert shop.ran == []


def test_a_repeated_name_is_checked_with_the_value_the_endpoint_would_read(
    shop: Shop, http: TestClient
) -> None:
    answer = http.post("/v1/orders", content=REPEATED, headers=JSON)
    assert answer.status_code == 422, "the endpoint reads the last value, which violates"
    assert answer.json()["type"].endswith("policy-violation")
    assert shop.ran == []


def test_a_body_larger_than_the_contracts_bound_is_checked_all_the_same(
    shop: Shop, http: TestClient
) -> None:
    padded = b'{"plan": "basic", "funding_type": "invoice"' + b" " * 1000 + b"}"
    assert len(padded) > shop.service.max_body_bytes
    answer = http.post("/v1/orders", content=padded, headers=JSON)
    assert answer.status_code == 422
    assert shop.ran == []


def test_an_endpoint_reading_json_itself_is_checked_whatever_the_media_type(
    domain: Domain,
) -> None:
    shop = Shop(domain, "endpoint reading the body itself")
    violating = b'{"plan": "basic", "funding_type": "invoice"}'
    with TestClient(shop.app) as http:
        answer = http.post("/v1/orders", content=violating, headers={"content-type": "text/plain"})
    assert answer.status_code == 422
    assert shop.ran == []


def test_the_apps_dependencies_answer_before_the_policy(domain: Domain) -> None:
    service = ContractService.open(domain, admin_token=TOKEN)
    app = FastAPI(lifespan=service.lifespan)
    app.include_router(service.contract_router(), prefix="/api")

    router = service.router()

    @router.post("/v1/orders")
    async def place(order: Order, user: Annotated[str, Depends(_signed_in)]) -> dict[str, str]:
        return {"order": "accepted", "by": user}

    app.include_router(router)
    violating = {"plan": "basic", "funding_type": "invoice"}
    with TestClient(app) as http:
        anonymous = http.post("/v1/orders", json=violating)
        signed = http.post("/v1/orders", json=violating, headers={"X-User": "ada"})
    assert anonymous.status_code == 401, "no recovery suggestion (reference data) before sign-in"
    assert signed.status_code == 422


def _signed_in(x_user: Annotated[str | None, Header()] = None) -> str:
    if x_user is None:
        raise HTTPException(401, "sign in first")
    return x_user


def test_an_optional_model_the_client_did_not_send_runs_the_endpoint(domain: Domain) -> None:
    service = ContractService.open(domain, admin_token=TOKEN)
    app = FastAPI(lifespan=service.lifespan)
    router = service.router()

    @router.post("/v1/orders")
    async def place(order: Order | None = None) -> dict[str, Any]:
        return {"order": None if order is None else order.plan}

    app.include_router(router)
    with TestClient(app) as http:
        empty = http.post("/v1/orders")
        violating = http.post("/v1/orders", json={"plan": "basic", "funding_type": "invoice"})
    assert empty.status_code == 200
    assert empty.json()["order"] is None
    assert violating.status_code == 422


def test_the_wrapped_endpoint_keeps_its_name_and_documented_body(domain: Domain) -> None:
    shop = Shop(domain, "async endpoint taking the model")
    operation = shop.app.openapi()["paths"]["/v1/orders"]["post"]
    assert operation["operationId"].startswith("place")
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/Order"}


class Other(Order):
    """A second request model."""


def test_model_parameters_names_the_first_parameter_of_each_model() -> None:
    def endpoint(a: int, order: Order, again: Order, other: Other | None = None) -> None: ...

    assert model_parameters(endpoint, [Order, Other]) == {Order: "order", Other: "other"}


def test_model_parameters_resolves_string_annotations_in_the_endpoints_module() -> None:
    def endpoint(order: Order) -> None: ...

    endpoint.__annotations__ = {"order": "Order", "return": "None"}
    assert model_parameters(endpoint, [Order]) == {Order: "order"}


def test_model_parameters_skips_what_it_cannot_wrap() -> None:
    def generator(order: Order) -> Iterator[int]:
        yield 1

    def unresolvable(order: Order) -> None: ...

    unresolvable.__annotations__ = {"order": "NoSuchName"}

    class Endpoint:
        def __call__(self, order: Order) -> None: ...

    def union(order: Order | int) -> None: ...

    assert model_parameters(generator, [Order]) == {}
    assert model_parameters(unresolvable, [Order]) == {}
    assert model_parameters(Endpoint(), [Order]) == {}
    assert model_parameters(union, [Order]) == {}


def test_a_nan_beside_the_order_does_not_skip_the_check_of_the_documented_example(
    tmp_path: Path,
) -> None:
    spec = importlib.util.spec_from_file_location("retrofit_example_checked", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    shop = tmp_path / "shop.db"
    with sqlite3.connect(shop) as db:
        db.execute("CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT NOT NULL)")
        db.execute("INSERT INTO plans VALUES ('enterprise', 'invoice')")
    app = example.create(f"sqlite:///{shop}", str(tmp_path / "registry.sqlite"))
    # Its Order ignores unknown members; json.loads reads the NaN, a strict parse refuses it.
    violating = b'{"plan": "enterprise", "funding_type": "card", "note": NaN}'
    with TestClient(app) as http:
        answer = http.post("/v1/orders", content=violating, headers=JSON)
    assert answer.status_code == 422
    assert answer.json()["type"].endswith("policy-violation")


def test_fastapis_error_messages_name_the_endpoints_own_file_not_the_wrapper(
    domain: Domain,
) -> None:
    service = ContractService.open(domain, admin_token=TOKEN)
    app = FastAPI(lifespan=service.lifespan)
    router = service.router()

    @router.post("/v1/orders")
    async def place(order: Order) -> Order:
        return {"not": "an order"}  # type: ignore[return-value]  # the app's own bug

    app.include_router(router)
    with TestClient(app) as http, pytest.raises(ResponseValidationError) as raised:
        http.post("/v1/orders", json=PASSING)
    assert f'File "{__file__}"' in str(raised.value)
