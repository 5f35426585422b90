"""Consistency by construction (issue 21, item 7): a handler that reads reference data through
``ContractSnapshot`` sees the state its request's policy was checked against; one that reads the
database directly can see a change the check never saw.

The window is the one between a writer's COMMIT and the worker adopting it (SPEC §8.2.2: the worker
serves the state before it). Here the worker's follower is not started, which holds that window
open deterministically instead of racing it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import BaseModel

from invalidation_contracts.protocol import Action
from invalidation_contracts.server import Domain, Route, SQLTable, Violation, policy
from invalidation_contracts.server.http import ContractService, ContractSnapshot


class Order(BaseModel):
    plan: str
    funding_type: str


@policy("funding_policy")
def funding_policy(request: Mapping[str, Any], tables: Any) -> Violation | None:
    plan = tables["plans"].get(request["plan"])
    if plan is None or request["funding_type"] == plan["funding"]:
        return None
    return Violation(
        "USE_REQUIRED_FUNDING_TYPE",
        f"plan {request['plan']} is paid by {plan['funding']}",
        {"funding_type": plan["funding"]},
        Action.REWRITE_VALUE,
        scope={"plan": request["plan"]},
    )


DOMAIN = Domain(
    "shop",
    {"plans": SQLTable("plans", key="id", columns=["funding"])},
    [],
    [
        Route("/v1/orders", Order, [funding_policy]),
        Route("/v1/orders-direct", Order, [funding_policy]),
        Route("/v1/plans", Order, [funding_policy]),
    ],
)


@pytest.fixture
def shop(tmp_path: Path) -> tuple[TestClient, Path]:
    database = tmp_path / "shop.db"
    with closing(sqlite3.connect(database)) as db, db:
        db.execute("CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT NOT NULL)")
        db.execute("INSERT INTO plans VALUES ('basic', 'card')")
    service = ContractService.open(  # a never-started worker vouches for max_lag_s after open
        DOMAIN, database=f"sqlite:///{database}", store=tmp_path / "registry.sqlite", max_lag_s=60
    )
    app = FastAPI()  # no lifespan: the worker does not follow the database by itself
    orders = service.router()

    @orders.post("/v1/orders")
    async def place(order: Order, data: ContractSnapshot) -> dict[str, Any]:
        plan = data.row("plans", order.plan)
        return {"charged_via": plan["funding"] if plan else None, "read_at": data.seq}

    @orders.post("/v1/plans")
    async def plan_row(order: Order, data: ContractSnapshot) -> dict[str, Any]:
        return {"plan": data.row("plans", order.plan)}  # a row returned as it is

    @orders.post("/v1/orders-direct")
    async def place_direct(order: Order) -> dict[str, Any]:
        with closing(sqlite3.connect(database)) as db:
            row = db.execute("SELECT funding FROM plans WHERE id = ?", (order.plan,)).fetchone()
        return {"charged_via": row[0] if row else None}

    app.include_router(orders)
    return TestClient(app), database


def commit_elsewhere(database: Path) -> None:
    with closing(sqlite3.connect(database)) as db, db:
        db.execute("UPDATE plans SET funding = 'wire' WHERE id = 'basic'")


def test_a_direct_database_read_races_the_policy_check(shop: tuple[TestClient, Path]) -> None:
    http, database = shop
    commit_elsewhere(database)
    answer = http.post("/v1/orders-direct", json={"plan": "basic", "funding_type": "card"})
    assert answer.status_code == 200, "the check passed against the state before the commit"
    body = answer.json()
    assert body["contract_seq"] == 0
    assert body["charged_via"] == "wire", "the handler acted on a row the check never saw"


def test_contract_snapshot_reads_the_state_the_policy_checked(
    shop: tuple[TestClient, Path],
) -> None:
    http, database = shop
    commit_elsewhere(database)
    answer = http.post("/v1/orders", json={"plan": "basic", "funding_type": "card"})
    assert answer.status_code == 200
    body = answer.json()
    assert body["charged_via"] == "card", "the row the check read, under the stamps it names"
    assert body["read_at"] == body["contract_seq"] == 0


def test_a_row_from_contract_snapshot_is_returned_as_a_plain_json_object(
    shop: tuple[TestClient, Path],
) -> None:
    http, _ = shop
    answer = http.post("/v1/plans", json={"plan": "basic", "funding_type": "card"})
    assert answer.status_code == 200
    assert answer.json()["plan"] == {"funding": "card"}


def test_contract_snapshot_outside_a_contract_route_is_a_clear_error(tmp_path: Path) -> None:
    app = FastAPI()

    @app.get("/plain")
    async def plain(data: ContractSnapshot) -> dict[str, int]:
        return {"seq": data.seq}

    with pytest.raises(RuntimeError, match="service.router"):
        TestClient(app).get("/plain")
