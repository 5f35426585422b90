"""A declared column renamed, dropped or retyped in the database (issue 41 item 2, fault and
change suite): the routes that read that table refuse with a 503 naming the table and the column,
the routes that read the other tables serve, at start and at the next reconciliation; the table is
served again by itself once the column is back. Before, the reconciliation's read failed whole
(every route of every table 503) and a start failed outright. Real PostgreSQL, a running
follower, writes by plain SQL."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

from invalidation_contracts.server import Domain, Route, SQLTable
from invalidation_contracts.server.http.app import create_app
from invalidation_contracts.server.policies import Violation, policy
from invalidation_contracts.server.sql import SQLSource

pytestmark = pytest.mark.postgres

TABLES = {
    "plans": SQLTable("plans", columns=["funding"]),
    "regions": SQLTable("regions", columns=["label"]),
}


class Pick(BaseModel):
    id: str


def reading(table: str) -> Route[Any]:
    @policy(f"{table}_exists")
    def exists(request: dict[str, Any], tables: Any) -> Violation | None:
        if request["id"] in tables[table]:
            return None
        return Violation("unknown_id", f"no {table} row", {"id": "?"}, "replace")

    return Route(f"/v1/{table}", Pick, [exists])


DOMAIN = Domain("columns", TABLES, [], [reading("plans"), reading("regions")])

CHANGES = {  # what an operator's migration does to plans.funding, and how it comes back
    "renamed": (
        "ALTER TABLE plans RENAME COLUMN funding TO payment",
        "ALTER TABLE plans RENAME COLUMN payment TO funding",
    ),
    "dropped": (
        "ALTER TABLE plans DROP COLUMN funding",
        "ALTER TABLE plans ADD COLUMN funding TEXT",
    ),
    "retyped": (
        "ALTER TABLE plans ALTER COLUMN funding TYPE bytea USING funding::bytea",
        "ALTER TABLE plans ALTER COLUMN funding TYPE text USING encode(funding, 'escape')",
    ),
}


@pytest.fixture
def database(postgres_url: str) -> str:
    with psycopg.connect(postgres_url, autocommit=True) as pg:
        pg.execute("CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT)")
        pg.execute("CREATE TABLE regions (id TEXT PRIMARY KEY, label TEXT)")
        pg.execute("INSERT INTO plans VALUES ('basic', 'card')")
        pg.execute("INSERT INTO regions VALUES ('eu', 'Europe')")
    return postgres_url


@pytest.fixture
def serve(database: str) -> Iterator[Callable[[], TestClient]]:
    """A worker over the database (reconciling every 0.2 s), its lifespan running."""
    clients: list[TestClient] = []

    def start() -> TestClient:
        source = SQLSource(database, DOMAIN.sql_tables, reconcile_interval_s=0.2)
        app = create_app(DOMAIN, store=database, database=source)
        client = TestClient(app, raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return client

    yield start
    for client in reversed(clients):
        client.__exit__(None, None, None)


def alter(database: str, statement: str) -> None:
    with psycopg.connect(database, autocommit=True) as pg:
        pg.execute(statement)


def status(client: TestClient, table: str) -> int:
    key = {"plans": "basic", "regions": "eu"}[table]
    return client.post(f"/v1/{table}", json={"id": key}).status_code


def eventually(predicate: Callable[[], bool], bound_s: float = 10.0) -> None:
    deadline = time.monotonic() + bound_s
    while not predicate():
        assert time.monotonic() < deadline, "not within the bound"
        time.sleep(0.05)


def refusal(client: TestClient) -> dict[str, Any]:
    answer = client.post("/v1/plans", json={"id": "basic"})
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = answer.json()
    assert "'plans'" in body["detail"] and "'funding'" in body["detail"], body["detail"]
    return body


def epoch_of_a_ready_worker(client: TestClient) -> str:
    """The worker's epoch; it says it is ready (a set-aside table is no outage)."""
    ready = client.get("/contract/ready")
    assert ready.status_code == 200 and ready.json()["ready"], ready.text
    return str(client.get("/contract/versions").json()["contract_epoch"])


def test_a_changed_column_refuses_its_tables_routes_at_the_next_reconciliation_and_recovers(
    database: str, serve: Callable[[], TestClient]
) -> None:
    client = serve()  # one worker through every change (each one behaviour: refuse, recover)
    assert status(client, "plans") == status(client, "regions") == 200
    epoch = epoch_of_a_ready_worker(client)
    for change, (broken, fixed) in CHANGES.items():
        alter(database, broken)
        eventually(lambda: status(client, "plans") == 503)
        refusal(client)
        assert status(client, "regions") == 200, f"{change}: the other table's routes serve"
        assert epoch_of_a_ready_worker(client) == epoch
        alter(database, fixed)
        eventually(lambda: status(client, "plans") == 200)
        assert status(client, "regions") == 200
        assert epoch_of_a_ready_worker(client) == epoch, f"{change}: the history is whole"


def test_a_worker_started_after_a_rename_serves_the_other_tables(
    database: str, serve: Callable[[], TestClient]
) -> None:
    serve().__exit__(None, None, None)  # a registry that served both tables
    alter(database, CHANGES["renamed"][0])
    client = serve()  # it started (it failed to: DeclarationError)
    refusal(client)
    assert status(client, "regions") == 200
    alter(database, CHANGES["renamed"][1])
    eventually(lambda: status(client, "plans") == 200)
