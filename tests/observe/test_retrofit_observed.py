"""An existing app with the contract retrofitted, instrumented under its own prefix, served by a
real uvicorn on 127.0.0.1: its refusals and passes are scored, its metrics and page answer."""

from __future__ import annotations

from typing import Any

import httpx
from fastapi import FastAPI
from tests.observe.conftest import ADMIN
from tests.observe.test_prometheus_scrape import value
from tests.service.conftest import TOKEN, Order, make_domain, running

from invalidation_contracts.observe import ClientKey, instrument
from invalidation_contracts.server.http import ContractService


def retrofitted() -> FastAPI:
    service = ContractService.open(make_domain(), admin_token=TOKEN)
    app = FastAPI(title="Existing shop", lifespan=service.lifespan)
    app.include_router(service.contract_router(), prefix="/api")
    orders = service.router()

    @orders.post("/v1/orders")
    async def place_order(order: Order) -> dict[str, Any]:
        return {"order": "accepted", "plan": order.plan}

    app.include_router(orders)
    instrument(app, service, prefix="/api", client_key=ClientKey.header("X-Agent"))
    return app


def test_a_retrofitted_app_scores_its_clients_and_serves_metrics_and_page():
    agent = {"X-Agent": "agent-7"}
    with running(retrofitted()) as url, httpx.Client(base_url=url) as client:
        assert client.post("/v1/orders", json={"plan": "basic"}, headers=agent).status_code == 422
        fixed = {"plan": "basic", "funding_type": "card"}
        assert client.post("/v1/orders", json=fixed, headers=agent).status_code == 200
        assert client.post("/v1/orders", json=fixed, headers=agent).status_code == 200
        scrape = client.get("/api/contract/metrics", headers=ADMIN)
        state = client.get("/api/contract/operator/state", headers=ADMIN).json()
        page = client.get("/api/contract/operator", headers=ADMIN)
        denied = client.get("/api/contract/operator")
    assert scrape.status_code == 200
    refusals = "invalidation_contracts_http_refusals_total"
    assert value(scrape.text, refusals, suggestion_type="USE_REQUIRED_FUNDING_TYPE") == 1
    (figures,) = state["clients"]
    assert (figures["episodes"], figures["first_try"], figures["retries"]) == (2, 1, 1)
    assert "agent-7" not in figures["client"]
    assert page.status_code == 200 and "/api/contract/operator/state" in page.text
    assert denied.status_code == 401


def test_a_retrofitted_apps_own_answers_are_counted_with_their_contract_bytes():
    with running(retrofitted()) as url, httpx.Client(base_url=url) as client:
        fixed = {"plan": "basic", "funding_type": "card"}
        assert client.post("/v1/orders", json=fixed).status_code == 200
        scrape = client.get("/api/contract/metrics", headers=ADMIN).text
    answered = "invalidation_contracts_http_responses_total"
    assert value(scrape, answered, http_route="/v1/orders", http_status_code="200") == 1
    contract = "invalidation_contracts_http_contract_bytes_total"
    assert value(scrape, contract, http_status_code="200") > 0
