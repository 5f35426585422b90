"""End to end: the real app under uvicorn on loopback, driven with httpx."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing

import httpx

from invalidation_contracts.protocol.problems import PROBLEM_BASE
from invalidation_contracts.server.http.app import create_app

TOKEN = "s3cret-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}


def sql(db, statement):
    with closing(sqlite3.connect(db)) as raw, raw:
        raw.execute(statement)


def test_a_live_server_answers_with_the_contract(domain, serve):
    with serve(create_app(domain, admin_token=TOKEN)) as url, httpx.Client(base_url=url) as http:
        fix = http.post("/v1/orders", json={"plan": "enterprise", "promo_code": "ENT10"})
        assert fix.status_code == 422
        assert fix.headers["content-type"] == "application/problem+json"
        [suggestion] = fix.json()["recovery_feedback"]["suggestions"]
        patch = http.post(
            "/admin/patch-table",
            headers=ADMIN,
            json={
                "table": "plans",
                "upsert": {"enterprise": {"funding": "wire", "promo": "ENT10"}},
            },
        )
        assert patch.json()["affected_downstream"] == ["funding_types:invoice"]
        again = http.post(
            "/v1/orders",
            json={"plan": "enterprise", "promo_code": "ENT10", **suggestion["parameters"]},
        )
        assert again.json()["recovery_feedback"]["suggestions"][0]["parameters"] == {
            "funding_type": "wire"
        }
        assert again.json()["table_versions"]["plans"] == "1.1.0"


def test_a_restarted_server_continues_with_the_same_versions_seq_and_epoch(domain, serve, tmp_path):
    db = tmp_path / "registry.db"
    with (
        serve(create_app(domain, store=db, admin_token=TOKEN)) as url,
        httpx.Client(base_url=url) as http,
    ):
        http.post(
            "/admin/patch-table",
            headers=ADMIN,
            json={"table": "plans", "upsert": {"gold": {"funding": "wire"}}},
        )
        http.post("/admin/rules", headers=ADMIN, json={"rules": []})
        before = http.get("/contract/versions").json()
        feed = http.get("/contract/changes", params={"since": 0}).json()
    with (
        serve(create_app(domain, store=db, admin_token=TOKEN)) as url,
        httpx.Client(base_url=url) as http,
    ):
        assert http.get("/contract/versions").json() == before
        assert before["contract_seq"] == 2
        assert (
            http.get(
                "/contract/changes", params={"since": 0, "epoch": before["contract_epoch"]}
            ).json()
            == feed
        )


def test_after_lost_history_a_client_with_an_old_seq_gets_410(domain, serve, tmp_path):
    db = tmp_path / "registry.db"
    with (
        serve(create_app(domain, store=db, admin_token=TOKEN)) as url,
        httpx.Client(base_url=url) as http,
    ):
        for funding in ("wire", "card", "invoice"):
            http.post(
                "/admin/patch-table",
                headers=ADMIN,
                json={"table": "plans", "upsert": {"x": {"funding": funding}}},
            )
        seen = http.get("/contract/versions").json()
    sql(db, "DELETE FROM ic_log WHERE seq = 1")
    with (
        serve(create_app(domain, store=db, admin_token=TOKEN)) as url,
        httpx.Client(base_url=url) as http,
    ):
        now = http.get("/contract/versions").json()
        assert now["contract_epoch"] != seen["contract_epoch"]
        for params in (
            {"since": seen["contract_seq"], "epoch": seen["contract_epoch"]},
            {"since": 2},
        ):
            response = http.get("/contract/changes", params=params)
            assert response.status_code == 410
            assert response.json()["type"] == PROBLEM_BASE + "resync-required"
        conditional = http.post(
            "/v1/orders",
            json={"plan": "basic", "funding_type": "card"},
            headers={"Contract-Since": str(seen["contract_seq"])},
        )
        assert conditional.json()["table_versions"] == seen["table_versions"], "resend every table"


def test_a_reload_that_cannot_be_persisted_is_500_and_changes_nothing(domain, serve, tmp_path):
    db = tmp_path / "registry.db"
    create_app(domain, store=db).state.store.close()
    sql(
        db,
        "CREATE TRIGGER fail BEFORE INSERT ON ic_log BEGIN SELECT RAISE(ABORT, 'disk full'); END",
    )
    with (
        serve(create_app(domain, store=db, admin_token=TOKEN)) as url,
        httpx.Client(base_url=url) as http,
    ):
        before = http.get("/contract/versions").json()
        response = http.post(
            "/admin/reload-table", headers=ADMIN, json={"table": "plans", "rows": {}}
        )
        assert response.status_code == 500
        assert response.json()["type"] == PROBLEM_BASE + "internal-error"
        assert "disk full" not in response.text
        assert http.get("/contract/versions").json() == before


def test_concurrent_requests_during_reloads_take_stamps_and_fixes_from_one_snapshot(
    domain, serve, tmp_path
):
    threads, per_thread, reload_count = 8, 30, 40
    failures: list[str] = []
    responses: list[dict] = []
    versions_at: dict[int, dict[str, str]] = {0: {"plans": "1.0.0", "funding_types": "2.0.0"}}
    lock = threading.Lock()
    start = threading.Barrier(threads + 2)

    def order(url):
        with httpx.Client(base_url=url, timeout=30) as http:
            start.wait()
            for i in range(per_thread):
                plan = ("enterprise", "basic", "starter")[i % 3]
                response = http.post("/v1/orders", json={"plan": plan})
                with lock:
                    responses.append(response.json())

    def reloader(url):
        with httpx.Client(base_url=url, timeout=30) as http:
            start.wait()
            for i in range(reload_count):
                funding = ("invoice", "wire", "card")[i % 3]
                if i % 2:
                    rows = {k: {"label": f"{k}-{i}"} for k in ("card", "invoice", "wire")}
                    body = {"table": "funding_types", "rows": rows}
                else:
                    body = {
                        "table": "plans",
                        "rows": {
                            "basic": {"funding": "card"},
                            "starter": {"funding": funding},
                            "enterprise": {"funding": funding, "promo": f"P{i}"},
                        },
                    }
                result = http.post("/admin/reload-table", headers=ADMIN, json=body).json()
                with lock:
                    versions = dict(versions_at[result["contract_seq"] - 1])
                    versions[result["table"]] = result["new_version"]
                    versions_at[result["contract_seq"]] = versions

    def changes(url):
        with httpx.Client(base_url=url, timeout=30) as http:
            start.wait()
            for _ in range(per_thread):
                feed = http.get("/contract/changes", params={"since": 0}).json()
                if any(r["seq"] > feed["last_seq"] for r in feed["rows"]):
                    failures.append(f"feed beyond its last_seq: {feed['last_seq']}")

    app = create_app(domain, store=tmp_path / "registry.db", admin_token=TOKEN)
    with serve(app) as url:
        workers = [threading.Thread(target=order, args=(url,)) for _ in range(threads)]
        workers += [
            threading.Thread(target=reloader, args=(url,)),
            threading.Thread(target=changes, args=(url,)),
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(120)
    assert not failures
    assert len(responses) == threads * per_thread
    assert len(versions_at) == reload_count + 1
    seen_seqs = set()
    for body in responses:
        seen_seqs.add(body["contract_seq"])
        assert body["table_versions"] == versions_at[body["contract_seq"]]
        for suggestion in body.get("recovery_feedback", {}).get("suggestions", []):
            for dependency in suggestion.get("tables", []):
                assert dependency["version"] == body["table_versions"][dependency["table"]]
    assert len(seen_seqs) > 1, "the requests did overlap the reloads"
