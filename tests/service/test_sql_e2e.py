"""End to end: Acme billing with its tables in the provider's own database (SQLite, PostgreSQL).

A plain-SQL UPDATE from another process evicts exactly the stale fix in an agent's memory (row
granularity, precision 1.00); a worker that cannot read its databases answers 503 without stamps.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.service.agent import Agent
from tests.support.postgres import with_database
from tests.support.processes import serving

from invalidation_contracts.domains import get_catalog, get_domain
from invalidation_contracts.protocol.problems import PROBLEM_BASE
from invalidation_contracts.server.http.app import create_app
from invalidation_contracts.server.sql import create_tables, sql_domain

TOKEN = "sql-admin-token"
ENV = {"INVALIDATION_CONTRACTS_ADMIN_TOKEN": TOKEN}
FAMILIES = (
    "governed-partner-growth",
    "funding-enterprise-annual",
    "control-partner-starter",
    "control-agency-pro",
    "plain-starter-monthly",
    "rounding-team-monthly",
)
ROTATE = "UPDATE active_csm_codes SET code = 'WINTERLAUNCH26' WHERE key = 'plan_partner_growth'"


class Database:
    """The provider's database: a URL for the server, plain SQL from another process."""

    def __init__(self, kind: str, url: str, raw: str) -> None:
        self.kind, self.url, self.raw = kind, url, raw

    def run_elsewhere(self, statement: str) -> None:
        """Run ``statement`` and commit it from a separate Python process (not this library)."""
        if self.kind == "sqlite":
            code = (
                "import sqlite3, sys; db = sqlite3.connect(sys.argv[1]); "
                "db.execute(sys.argv[2]); db.commit(); db.close()"
            )
        else:
            code = (
                "import psycopg, sys\n"
                "with psycopg.connect(sys.argv[1]) as db: db.execute(sys.argv[2])"
            )
        subprocess.run([sys.executable, "-c", code, self.raw, statement], check=True, timeout=60)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        path = tmp_path / "acme.db"
        yield Database("sqlite", f"sqlite:///{path}", str(path))
    else:
        url = request.getfixturevalue("postgres_url")
        yield Database("postgres", url, url)


def wait_for_version(url: str, table: str, old: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if httpx.get(url + "/contract/versions").json()["table_versions"][table] != old:
            return
        time.sleep(0.05)
    raise AssertionError(f"{table} never moved from {old}")


@pytest.mark.workers
def test_a_plain_sql_update_from_another_process_evicts_exactly_the_stale_fix(
    database: Database, tmp_path: Path
) -> None:
    store = str(tmp_path / "registry.sqlite") if database.kind == "sqlite" else database.url
    args = ["--domain", "acme_billing", "--database", database.url, "--create-tables"]
    catalog = get_catalog("acme_billing")
    with serving([*args, "--db", store], tmp_path / "logs", env=ENV) as url:
        agent = Agent([url])
        try:
            for family in FAMILIES:
                assert agent.solve(catalog.family(family).draft()) > 0
            learned = agent.live()
            for family in FAMILIES[:5]:  # the rounding fix is recompute: never cached
                assert agent.solve(catalog.family(family).draft()) == 1, "served from memory"
            database.run_elsewhere(ROTATE)
            wait_for_version(url, "active_csm_codes", "1.0.0")
            for family in FAMILIES:
                assert agent.solve(catalog.family(family).draft()) > 0
            evicted = agent.evictions()
            assert evicted == [("ADD_REQUIRED_PROMO_CODE plan_partner_growth", "row-changed")]
            correct = [e for e, _ in evicted if e.endswith("plan_partner_growth")]
            assert len(correct) / len(evicted) == 1.0, "precision 1.00"
            assert agent.live() == learned
            [governed] = [
                e
                for e in agent.memory.entries("http://acme.test")
                if e.suggestion.type == "ADD_REQUIRED_PROMO_CODE"
                and (e.suggestion.scope or {}).get("plan") == "plan_partner_growth"
            ]
            assert governed.suggestion.parameters == {"promo_code": "WINTERLAUNCH26"}
            assert agent.recorder.count(410) == 0
        finally:
            agent.close()


@pytest.mark.postgres
def test_a_worker_that_cannot_reach_postgresql_answers_503_without_stamps(
    postgres_url: str, serve: Callable[..., Any]
) -> None:
    import psycopg

    create_tables(postgres_url, get_domain("acme_billing"))
    domain = sql_domain(get_domain("acme_billing"))
    name = postgres_url.split("?", 1)[0].rsplit("/", 1)[1]
    admin_url = with_database(postgres_url, "postgres")
    app = create_app(domain, store=postgres_url, database=postgres_url, admin_token=TOKEN)
    with serve(app) as url, psycopg.connect(admin_url, autocommit=True) as admin:
        assert httpx.get(url + "/contract/versions").status_code == 200
        admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
        )
        try:
            answer = poll(url, 503)
            assert answer.headers["content-type"] == "application/problem+json"
            body = answer.json()
            assert body["type"] == PROBLEM_BASE + "registry-unavailable"
            assert "table_versions" not in body and "contract_seq" not in body
            assert answer.headers["retry-after"]
            order = catalog_draft("plain-starter-monthly")
            assert httpx.post(url + "/v1/subscriptions", json=order).status_code == 503
        finally:
            admin.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')
        assert poll(url, 200).json()["contract_seq"] == 0


def test_a_worker_whose_capture_is_gone_answers_503(
    tmp_path: Path, serve: Callable[..., Any]
) -> None:
    database = Database("sqlite", f"sqlite:///{tmp_path / 'acme.db'}", str(tmp_path / "acme.db"))
    create_tables(database.url, get_domain("acme_billing"))
    domain = sql_domain(get_domain("acme_billing"))
    app = create_app(domain, store=tmp_path / "registry.sqlite", database=database.url)
    with serve(app) as url:
        assert httpx.get(url + "/contract/versions").status_code == 200
        database.run_elsewhere("DROP TABLE ic_capture")
        body = poll(url, 503).json()
        assert body["type"] == PROBLEM_BASE + "registry-unavailable"
        assert "ic_capture" in body["detail"]


def poll(url: str, status: int) -> httpx.Response:
    deadline = time.monotonic() + 30
    while True:
        answer = httpx.get(url + "/contract/versions")
        if answer.status_code == status or time.monotonic() > deadline:
            assert answer.status_code == status, answer.text
            return answer
        time.sleep(0.05)


def catalog_draft(family: str) -> dict[str, object]:
    return get_catalog("acme_billing").family(family).draft()


def test_an_admin_reload_over_http_writes_the_providers_database(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    database = Database("sqlite", f"sqlite:///{tmp_path / 'acme.db'}", str(tmp_path / "acme.db"))
    create_tables(database.url, get_domain("acme_billing"))
    app = create_app(
        sql_domain(get_domain("acme_billing")),
        store=tmp_path / "registry.sqlite",
        database=database.url,
        admin_token=TOKEN,
    )
    rotation = get_catalog("acme_billing").read_snapshot("active_csm_codes.rotation-1")
    with TestClient(app) as http:
        answer = http.post(
            "/admin/reload-table",
            json={"table": rotation.table, "rows": rotation.rows},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["diff"]["changed"] == ["plan_partner_growth"]
        bad = http.post(
            "/admin/patch-table",
            json={"table": "active_csm_codes", "upsert": {"x": {"colour": "red"}}},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert bad.status_code == 422 and "colour" in bad.json()["detail"]
    import sqlite3

    with sqlite3.connect(database.raw) as db:
        [(code,)] = db.execute(
            "SELECT code FROM active_csm_codes WHERE key = 'plan_partner_growth'"
        ).fetchall()
    assert code == rotation.rows["plan_partner_growth"]["code"]


def test_an_unreadable_capture_record_is_quarantined_and_listed_not_a_503(
    tmp_path: Path, serve: Callable[..., Any]
) -> None:
    database = Database("sqlite", f"sqlite:///{tmp_path / 'acme.db'}", str(tmp_path / "acme.db"))
    create_tables(database.url, get_domain("acme_billing"))
    domain = sql_domain(get_domain("acme_billing"))
    app = create_app(
        domain, store=tmp_path / "registry.sqlite", database=database.url, admin_token=TOKEN
    )
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with serve(app) as url:
        assert httpx.get(url + "/admin/quarantine", headers=auth).json() == {"quarantined": []}
        database.run_elsewhere(  # what a release without the value checks could have captured
            "INSERT INTO ic_capture (table_name, op, key, row) VALUES ('active_csm_codes',"
            " 'upsert', '[\"plan_forged\"]', '{\"code\": 9007199254740993}')"
        )
        database.run_elsewhere(ROTATE)
        wait_for_version(url, "active_csm_codes", "1.0.0")
        assert httpx.get(url + "/contract/versions").status_code == 200
        [entry] = httpx.get(url + "/admin/quarantine", headers=auth).json()["quarantined"]
        assert entry["type"] == PROBLEM_BASE + "unservable-row"
        assert (entry["table"], entry["key"]) == ("active_csm_codes", "plan_forged")
        assert "9007199254740993" in entry["detail"]
        assert httpx.get(url + "/admin/quarantine").status_code == 401
