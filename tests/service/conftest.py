"""Fixtures for the provider-service tests: a small shop domain, apps, and a real uvicorn server."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import uvicorn
from fastapi.testclient import TestClient
from pydantic import BaseModel, ConfigDict, Field

from invalidation_contracts.protocol.models import Action
from invalidation_contracts.server import Domain, Route, Rule, TableSpec, Violation, policy
from invalidation_contracts.server.http.app import create_app

TOKEN = "s3cret-admin-token"
#: A subscription draft for ``acme_billing``'s POST /v1/subscriptions (the served-process tests).
DRAFT = {
    "customer": "cus_northwind",
    "plan": "plan_basic_monthly",
    "payment_method_token": "acme_pm_visa_corporate",
    "amount_cents": 1900,
    "currency": "usd",
}
PLANS = {
    "basic": {"funding": "card"},
    "enterprise": {"funding": "invoice", "promo": "ENT10"},
    "starter": {"funding": "card"},
}
FUNDING_TYPES = {
    "card": {"label": "Card"},
    "invoice": {"label": "Invoice"},
    "wire": {"label": "Wire"},
}


class Order(BaseModel):
    """POST /v1/orders."""

    model_config = ConfigDict(extra="forbid")

    plan: str = Field(min_length=1, max_length=64)
    funding_type: str | None = None
    promo_code: str | None = None
    quantity: int = Field(default=1, ge=1, le=1_000_000)


@policy("funding_policy")
def funding_policy(request, tables):
    plan = tables["plans"].get(request["plan"])
    if plan is None:
        return None
    tables.rules.find("plans", "funding_types")
    required = plan["funding"]
    tables["funding_types"].get(required)
    if request.get("funding_type") == required:
        return None
    return Violation(
        type="USE_REQUIRED_FUNDING_TYPE",
        message=f"plan {request['plan']} requires funding type {required}",
        parameters={"funding_type": required},
        action=Action.ADD_FIELD if request.get("funding_type") is None else Action.REWRITE_VALUE,
        scope={"plan": request["plan"]},
    )


@policy("promo_policy")
def promo_policy(request, tables):
    plan = tables["plans"].get(request["plan"])
    if plan is None or "promo" not in plan or request.get("promo_code") == plan["promo"]:
        return None
    return Violation(
        type="ADD_REQUIRED_PROMO_CODE",
        message=f"plan {request['plan']} requires promo code {plan['promo']}",
        parameters={"promo_code": plan["promo"]},
        action=Action.ADD_FIELD,
        scope={"plan": request["plan"]},
    )


@policy("quantity_policy")
def quantity_policy(request, tables):
    if request["quantity"] <= 100:
        return None
    return Violation(
        type="SPLIT_ORDER",
        message="orders hold at most 100 units",
        parameters={"quantity": 100},
        action=Action.REWRITE_VALUE,
    )


def make_domain(name: str = "test_shop") -> Domain:
    """Plans require a funding type (two tables, one rule); one table-free policy."""
    return Domain(
        name=name,
        tables={"plans": TableSpec(PLANS), "funding_types": TableSpec(FUNDING_TYPES, "2.0.0")},
        rules=(Rule("plans", "funding_types", "requires_funding", via="funding"),),
        routes=(
            Route(
                path="/v1/orders",
                request_model=Order,
                policies=(funding_policy, promo_policy, quantity_policy),
                on_success=lambda order, state: {"order": "accepted", "plan": order.plan},
                summary="Place an order",
            ),
        ),
        description="A test shop.",
    )


@pytest.fixture
def domain() -> Domain:
    return make_domain()


@pytest.fixture
def admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def make_client(domain) -> Iterator[Callable[..., TestClient]]:
    """Build a TestClient (lifespan running) over ``create_app(domain, **options)``."""
    clients: list[TestClient] = []

    def build(**options) -> TestClient:
        options.setdefault("admin_token", TOKEN)
        client = TestClient(
            create_app(options.pop("domain", domain), **options), raise_server_exceptions=False
        )
        client.__enter__()
        clients.append(client)
        return client

    yield build
    for client in reversed(clients):
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client) -> TestClient:
    return make_client()


@contextmanager
def running(
    app, *, lifespan: str = "on", graceful_s: float | None = None, port: int = 0
) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port in a background thread; yield its URL.

    ``lifespan="off"``: the app's startup never runs (a shared-store worker then never follows
    the history by itself, so it lags until a request makes it catch up). ``graceful_s``: how
    long a stop waits for open responses (watch streams) before closing them; ``port``: serve on
    this one (a restart on the same address), else a free one.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    port = listener.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            app, log_level="warning", lifespan=lifespan, timeout_graceful_shutdown=graceful_s
        )
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        listener.close()


@pytest.fixture
def serve():
    """``with serve(app) as url:`` runs a real server for the block."""
    return running
