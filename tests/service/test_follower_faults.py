"""A worker never serves what it has not verified (docs/SPEC.md §8.2.5), under real faults.

*Unverified* is defined against the lag bound ``max_lag_s`` (default 2 s): once a change has
committed at time T, a response to a request sent after ``T + max_lag_s`` must carry that change's
seq or be a ``503 registry-unavailable`` without stamps; while no database answers, every request
sent more than ``max_lag_s`` after the outage began gets 503. Each fault — PostgreSQL terminating
the LISTEN connections, PostgreSQL restarting, SQLite's registry write lock held by another
process — must end with every worker ready again by itself, with no restart of the worker.
"""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.service.probes import UNAVAILABLE, Probe, wait_every_worker_ready
from tests.support.acme_sqlite import acme_on_sqlite
from tests.support.postgres import PostgresCluster, PostgresUnavailable
from tests.support.processes import serving

from invalidation_contracts.domains import get_domain
from invalidation_contracts.server.http.app import create_app
from invalidation_contracts.server.sql import create_tables
from invalidation_contracts.server.store.postgres import LISTENER_APPLICATION_NAME
from invalidation_contracts.server.worker.timing import DEFAULT_MAX_LAG_S, backoff

KEY = "plan_partner_growth"


def rotate(code: str) -> str:
    return f"UPDATE active_csm_codes SET code = '{code}' WHERE key = '{KEY}'"


def commit(url: str, statement: str) -> float:
    """Run ``statement`` from another process with plain psycopg; the time its COMMIT returned."""
    code = "import psycopg, sys\nwith psycopg.connect(sys.argv[1]) as db: db.execute(sys.argv[2])"
    subprocess.run([sys.executable, "-c", code, url, statement], check=True, timeout=60)
    return time.monotonic()


def current_seq(url: str) -> int:
    return int(httpx.get(url + "/contract/versions", timeout=10).json()["contract_seq"])


# -- the backoff ---------------------------------------------------------------------------------


@given(st.integers(1, 10_000), st.integers(0, 2**32))
def test_the_retry_backoff_is_jittered_and_never_exceeds_its_cap(failures: int, seed: int) -> None:
    wait = backoff(failures, 0.05, 1.0, random.Random(seed))
    ceiling = min(1.0, 0.05 * 2.0 ** min(failures - 1, 64))
    assert ceiling / 2 <= wait <= ceiling


# -- PostgreSQL, several uvicorn workers ---------------------------------------------------------


@pytest.fixture
def acme_postgres(postgres_url: str) -> str:
    create_tables(postgres_url, get_domain("acme_billing"))
    return postgres_url


def serve_workers(
    stack: ExitStack, database: str, workers: int, logs: Path, capture: str = "triggers"
) -> str:
    args = ["--domain", "acme_billing", "--database", database, "--db", database]
    args += ["--capture", capture]
    return stack.enter_context(serving([*args, "--workers", str(workers)], logs))


def terminate_listeners(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as db:
        rows = db.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (LISTENER_APPLICATION_NAME,),
        ).fetchall()
    return len(rows)


@pytest.mark.workers
@pytest.mark.postgres
def test_workers_whose_listen_connections_are_terminated_serve_no_unverified_stamp(
    acme_postgres: str, tmp_path: Path
) -> None:
    with ExitStack() as stack:
        url = serve_workers(stack, acme_postgres, 2, tmp_path / "logs")
        wait_every_worker_ready(url, 2, 0)
        with Probe(url) as probe:
            assert terminate_listeners(acme_postgres) >= 2
            committed = commit(acme_postgres, rotate("AFTERKILL1"))
            seq = 1  # the first change of a fresh registry
            wait_every_worker_ready(url, 2, seq)
            time.sleep(DEFAULT_MAX_LAG_S + 0.5)
        assert probe.unverified(committed, seq) == []
        assert any(s.seq == seq for s in probe.seen)
        # The wake-up connections came back: a second commit reaches both workers again.
        assert terminate_listeners(acme_postgres) >= 2
        commit(acme_postgres, rotate("AFTERKILL2"))
        wait_every_worker_ready(url, 2, 2)


@pytest.fixture
def own_cluster() -> Iterator[PostgresCluster]:
    """A PostgreSQL server of this test alone, which it may stop and start."""
    try:
        cluster = PostgresCluster.start()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    try:
        if not cluster.restartable:
            pytest.skip("the suite runs against an external server, which it cannot restart")
        yield cluster
    finally:
        cluster.stop()


@pytest.mark.workers
@pytest.mark.postgres
@pytest.mark.parametrize("capture", ["triggers", "logical"])
def test_workers_answer_503_while_postgresql_restarts_then_recover_by_themselves(
    own_cluster: PostgresCluster, tmp_path: Path, capture: str
) -> None:
    database = own_cluster.database()
    create_tables(database, get_domain("acme_billing"))
    with ExitStack() as stack:
        url = serve_workers(stack, database, 2, tmp_path / "logs", capture)
        wait_every_worker_ready(url, 2, 0)
        with Probe(url) as probe:
            time.sleep(0.5)
            own_cluster.halt()
            down = time.monotonic()
            time.sleep(DEFAULT_MAX_LAG_S + 2.0)
            back = time.monotonic()
            own_cluster.resume()
            committed = commit(database, rotate("AFTERRESTART"))
            wait_every_worker_ready(url, 2, 1)
            time.sleep(DEFAULT_MAX_LAG_S + 0.5)
        assert probe.stamped_between(down + DEFAULT_MAX_LAG_S, back) == []
        assert [s for s in probe.seen if down < s.sent < back and s.status == 503]
        assert probe.unverified(committed, 1) == []


# -- SQLite: a registry write lock held by another process ----------------------------------------


@pytest.mark.workers
def test_a_sqlite_worker_blocked_behind_anothers_write_lock_answers_503_then_recovers(
    tmp_path: Path, serve: Callable[..., Any]
) -> None:
    app, acme = acme_on_sqlite(tmp_path)
    registry = tmp_path / "registry.sqlite"
    with serve(app) as url, closing(sqlite3.connect(registry, isolation_level=None)) as holder:
        assert current_seq(url) == 0
        with Probe(url) as probe:
            holder.execute("BEGIN IMMEDIATE")  # the registry's write lock, held elsewhere
            with closing(sqlite3.connect(acme)) as db, db:
                db.execute(rotate("WHILELOCKED"))
            committed = time.monotonic()
            time.sleep(DEFAULT_MAX_LAG_S + 1.5)
            locked = [s for s in probe.seen if s.sent > committed + DEFAULT_MAX_LAG_S]
            assert locked and all(s.status == 503 for s in locked)
            ready = httpx.get(url + "/contract/ready")
            assert ready.status_code == 503
            assert ready.json()["type"] == UNAVAILABLE and ready.json()["ready"] is False
            assert ready.headers["retry-after"]
            assert httpx.get(url + "/contract/live").status_code == 200, "a restart is not needed"
            holder.execute("ROLLBACK")
            wait_every_worker_ready(url, 1, 1)
        assert probe.unverified(committed, 1) == []


def test_the_probes_report_position_lag_and_state_of_a_following_worker(
    tmp_path: Path, serve: Callable[..., Any]
) -> None:
    app = create_app(get_domain("acme_billing"), store=tmp_path / "registry.sqlite")
    with serve(app) as url:
        ready = httpx.get(url + "/contract/ready")
        assert ready.status_code == 200, ready.text
        body = ready.json()
        assert body["state"] == "following" and body["live"] and body["ready"]
        assert body["contract_seq"] == 0 and body["contract_epoch"]
        assert 0 <= body["lag_s"] < body["max_lag_s"] == DEFAULT_MAX_LAG_S
        assert ready.headers["cache-control"] == "no-store"
        assert httpx.get(url + "/contract/live").json()["live"] is True


def test_a_lag_bound_below_the_heartbeat_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_lag_s"):
        create_app(get_domain("acme_billing"), store=tmp_path / "r.sqlite", max_lag_s=0.5)
