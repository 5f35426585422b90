"""Admin writes to a provider table with undeclared NOT NULL columns (issue 21, item 8): existing
rows are updated in place (the undeclared columns untouched), a new row that would leave one empty
is a 422 naming the columns, and nothing of a refused write is kept."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from invalidation_contracts.server import Domain, SQLTable
from invalidation_contracts.server.http.app import create_app

TOKEN = "patch-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
SCHEMA = (
    "CREATE TABLE carriers (code TEXT PRIMARY KEY, name TEXT NOT NULL,"
    " active BOOLEAN, max_weight_kg INTEGER, note TEXT NOT NULL DEFAULT 'n/a')"
)
DOMAIN = Domain(
    "shipping",
    {"carriers": SQLTable("carriers", key="code", columns=["active", "max_weight_kg"])},
    [],
    [],
)


class Database:
    def __init__(self, kind: str, url: str) -> None:
        self.kind, self.url = kind, url

    def sql(self, statement: str) -> list[tuple[object, ...]]:
        if self.kind == "sqlite":
            with closing(sqlite3.connect(self.url.removeprefix("sqlite:///"))) as db, db:
                return db.execute(statement).fetchall()
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as db:
            cursor = db.execute(statement.encode())
            return cursor.fetchall() if cursor.description else []


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Database:
    if request.param == "sqlite":
        db = Database("sqlite", f"sqlite:///{tmp_path / 'ship.db'}")
    else:
        db = Database("postgres", request.getfixturevalue("postgres_url"))
    db.sql(SCHEMA)
    db.sql(
        "INSERT INTO carriers (code, name, active, max_weight_kg) VALUES ('dhl', 'DHL', true, 30)"
    )
    return db


@pytest.fixture
def http(database: Database, tmp_path: Path) -> Iterator[TestClient]:
    app = create_app(
        DOMAIN, database=database.url, store=tmp_path / "registry.sqlite", admin_token=TOKEN
    )
    with TestClient(app) as client:
        yield client


def patch(http: TestClient, upsert: dict[str, object]) -> object:
    return http.post(
        "/admin/patch-table", json={"table": "carriers", "upsert": upsert}, headers=ADMIN
    )


def test_patching_an_existing_row_updates_it_and_keeps_the_undeclared_columns(
    database: Database, http: TestClient
) -> None:
    answer = patch(http, {"dhl": {"active": True, "max_weight_kg": 80}})
    assert answer.status_code == 200, answer.text
    assert answer.json()["diff"]["changed"] == ["dhl"]
    assert database.sql("SELECT name, max_weight_kg, note FROM carriers WHERE code = 'dhl'") == [
        ("DHL", 80, "n/a")
    ]


def test_a_new_row_missing_an_undeclared_not_null_column_is_422_naming_it(
    database: Database, http: TestClient
) -> None:
    answer = patch(http, {"ups": {"active": True, "max_weight_kg": 20}})
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert "'ups'" in detail and "name" in detail and "note" not in detail.split("column(s)")[1]
    assert database.sql("SELECT code FROM carriers ORDER BY code") == [("dhl",)]
    assert http.get("/contract/versions").json()["contract_seq"] == 0, "nothing was captured"


def test_a_mixed_patch_is_refused_whole(database: Database, http: TestClient) -> None:
    answer = patch(
        http,
        {"dhl": {"active": False, "max_weight_kg": 1}, "ups": {"active": True, "max_weight_kg": 2}},
    )
    assert answer.status_code == 422
    assert database.sql("SELECT max_weight_kg FROM carriers WHERE code = 'dhl'") == [(30,)]
