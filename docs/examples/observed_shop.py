"""An existing FastAPI app with the contract retrofitted and instrumented: metrics, client scores.

Needs the ``server`` and ``otel`` extras: ``pip install '.[server,otel]'``.

The app is served by uvicorn on 127.0.0.1 (a free port) for the run:
    python docs/examples/observed_shop.py
"""

import os
from collections.abc import Mapping
from typing import Any

from _served import served
from fastapi import FastAPI
from pydantic import BaseModel

from invalidation_contracts.observe import ClientKey, instrument
from invalidation_contracts.protocol import Action
from invalidation_contracts.server import Domain, Route, TableSpec, TrackedTables, Violation, policy
from invalidation_contracts.server.http import ContractService

ADMIN = {"Authorization": "Bearer operator-secret-for-the-example"}


class Order(BaseModel):
    plan: str
    funding_type: str | None = None


@policy("funding_policy")
def funding_policy(request: Mapping[str, Any], tables: TrackedTables) -> Violation | None:
    plan = tables["plans"].get(request["plan"])
    if plan is None or request.get("funding_type") == plan["funding"]:
        return None
    return Violation(
        "USE_REQUIRED_FUNDING_TYPE",
        f"plan {request['plan']} is paid by {plan['funding']}",
        {"funding_type": plan["funding"]},
        Action.ADD_FIELD,
        scope={"plan": request["plan"]},
    )


DOMAIN = Domain(
    "shop",
    {"plans": TableSpec({"basic": {"funding": "card"}, "enterprise": {"funding": "invoice"}})},
    [],
    [Route("/v1/orders", Order, [funding_policy])],
)


def create() -> FastAPI:
    service = ContractService.open(DOMAIN, admin_token=ADMIN["Authorization"].split()[1])
    app = FastAPI(title="Shop", lifespan=service.lifespan)
    app.include_router(service.contract_router(), prefix="/api")
    orders = service.router()

    @orders.post("/v1/orders")
    async def place_order(order: Order) -> dict[str, Any]:
        return {"order": "accepted", "plan": order.plan}

    app.include_router(orders)
    observed = instrument(
        app,
        service,
        prefix="/api",
        client_key=ClientKey.bearer(secret=os.environb[b"CLIENT_KEY_SECRET"]),
    )
    app.state.observed = observed  # its instruments, for a test or a shutdown hook
    return app


def main() -> None:
    os.environ.setdefault("CLIENT_KEY_SECRET", "a secret that keys the client hashes")
    agent = {"Authorization": "Bearer the-agents-own-api-token"}
    with served(create()) as http:
        first = http.post("/v1/orders", json={"plan": "basic"}, headers=agent)
        fixed = http.post(
            "/v1/orders", json={"plan": "basic", "funding_type": "card"}, headers=agent
        )
        print("agent:", first.status_code, "then", fixed.status_code)
        scrape = http.get("/api/contract/metrics", headers=ADMIN).text
        refusals = [
            line
            for line in scrape.splitlines()
            if line.startswith("invalidation_contracts_http_refusals_total{")
        ]
        print("metric:", refusals[0])
        (client,) = http.get("/api/contract/operator/state", headers=ADMIN).json()["clients"]
        print(
            "client", client["client"], "episodes", client["episodes"], "retries", client["retries"]
        )


if __name__ == "__main__":
    main()
