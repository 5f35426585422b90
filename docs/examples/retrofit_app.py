"""Adding the invalidation contract to an existing FastAPI app whose reference data is in SQL.

Needs the ``server`` and ``sql`` extras: ``pip install '.[server,sql]'``.

The shop below is an ordinary FastAPI app: its own routes, its own exception handler, its own
OpenAPI, and a ``plans`` table in its own database that other programs write. The contract is
added in four lines (marked ``# contract``): a service over the database, its routers under
``/api``, and the route class on the routes that should carry it.

Run the demonstration (SQLite in a temporary directory, the app under uvicorn on 127.0.0.1):
    python docs/examples/retrofit_app.py
Serve it (four workers sharing one registry; PostgreSQL works the same with two URLs), on a shop
database that holds its plans table:
    python -c "import sqlite3; sqlite3.connect('shop.db').execute('CREATE TABLE plans \
        (id TEXT PRIMARY KEY, funding TEXT NOT NULL, note TEXT)')"
    SHOP_DATABASE=sqlite:///shop.db SHOP_REGISTRY=registry.sqlite \
        uvicorn --app-dir docs/examples retrofit_app:create --factory --workers 4
"""

from __future__ import annotations

import os
import sqlite3
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from invalidation_contracts.protocol import Action
from invalidation_contracts.server import (
    Domain,
    Route,
    SQLTable,
    TrackedTables,
    Violation,
    policy,
)
from invalidation_contracts.server.http import ContractService, ContractSnapshot


class OutOfStock(Exception):
    """The shop's own error, answered by the shop's own handler."""


class Order(BaseModel):
    plan: str
    funding_type: str | None = None


@policy("funding_policy")
def funding_policy(request: Mapping[str, Any], tables: TrackedTables) -> Violation | None:
    """Each plan is paid with the funding type its row names (read → a dependency on that row)."""
    plan = tables["plans"].get(request["plan"])
    if plan is None or request.get("funding_type") == plan["funding"]:
        return None
    return Violation(
        "USE_REQUIRED_FUNDING_TYPE",
        f"plan {request['plan']} is paid by {plan['funding']}",
        {"funding_type": plan["funding"]},
        Action.ADD_FIELD if request.get("funding_type") is None else Action.REWRITE_VALUE,
        scope={"plan": request["plan"]},
    )


DOMAIN = Domain(
    "shop",
    {"plans": SQLTable("plans", key="id", columns=["funding"])},  # the shop's own table
    [],
    [Route("/v1/orders", Order, [funding_policy])],
)


def create(database: str | None = None, registry: str | None = None) -> FastAPI:
    """The shop, with the contract; ``database`` and ``registry`` default to the environment."""
    contract = ContractService.open(  # contract
        DOMAIN,
        database=database or os.environ["SHOP_DATABASE"],
        store=registry or os.environ["SHOP_REGISTRY"],
        admin_token=os.environ.get("SHOP_ADMIN_TOKEN", "change-me"),
    )
    app = FastAPI(title="Shop", lifespan=contract.lifespan)  # contract: lifespan
    app.include_router(contract.contract_router(), prefix="/api")  # contract
    app.include_router(contract.admin_router(), prefix="/api")  # contract
    orders = contract.router()  # contract: an APIRouter whose routes carry it

    @app.exception_handler(OutOfStock)
    async def out_of_stock(request: Request, exc: OutOfStock) -> JSONResponse:
        return JSONResponse({"error": "out of stock", "plan": str(exc)}, status_code=409)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @orders.post("/v1/orders")
    async def place_order(order: Order, data: ContractSnapshot) -> dict[str, Any]:
        if order.plan == "retired":
            raise OutOfStock(order.plan)
        plan = data.row("plans", order.plan)  # the row funding_policy read, not a fresh SELECT
        return {"order": "accepted", "plan": order.plan, "funding": plan and plan["funding"]}

    app.include_router(orders)
    return app


def main() -> None:
    from _served import served  # uvicorn on 127.0.0.1 and a stdlib client: no extra beyond these

    work = Path(tempfile.mkdtemp(prefix="retrofit-"))
    shop = work / "shop.db"
    with sqlite3.connect(shop) as db:  # the shop's existing schema and data
        db.execute("CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT NOT NULL, note TEXT)")
        db.execute("INSERT INTO plans VALUES ('basic', 'card', ''), ('enterprise', 'invoice', '')")
    with served(create(f"sqlite:///{shop}", str(work / "registry.sqlite"))) as http:
        print("own route:", http.get("/health").json())
        first = http.post("/v1/orders", json={"plan": "enterprise"})
        [fix] = first.json()["recovery_feedback"]["suggestions"]
        print("first try:", first.status_code, fix["type"], fix["parameters"], fix["tables"])
        fixed = http.post("/v1/orders", json={"plan": "enterprise", **fix["parameters"]})
        body = fixed.json()
        print("with the fix:", fixed.status_code, body["order"], body["table_versions"])
        own_error = http.post("/v1/orders", json={"plan": "retired"})
        print("own error handler:", own_error.status_code, own_error.json())
        with sqlite3.connect(shop) as db:  # another program changes the reference data
            db.execute("UPDATE plans SET funding = 'wire' WHERE id = 'enterprise'")
        for _ in range(200):  # the worker notices within its poll interval
            versions = http.get("/api/contract/versions").json()["table_versions"]
            if versions["plans"] != "1.0.0":
                break
            time.sleep(0.02)
        change = http.get("/api/contract/changes", params={"since": 0}).json()["rows"]
        print("after an UPDATE:", versions, [(c["key"], c["op"]) for c in change])
        again = http.post("/v1/orders", json={"plan": "enterprise", **fix["parameters"]})
        print(
            "the cached fix now:",
            again.status_code,
            [s["parameters"] for s in again.json()["recovery_feedback"]["suggestions"]],
        )
        paths = sorted(http.get("/openapi.json").json()["paths"])
        print("OpenAPI paths:", paths)


if __name__ == "__main__":
    main()
