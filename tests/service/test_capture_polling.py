"""Captured writes reach every worker without any writer's NOTIFY (docs/decisions.md, issue 21).

A provider writer's transaction sends no ``NOTIFY`` (a notifying transaction holds PostgreSQL's
one notification-queue lock through its commit, so two writers of two tables would commit one
after the other). The worker leading the capture polls the capture's head instead and its
registry commit wakes the other workers. These tests run ``serve --workers 2`` on PostgreSQL with
a second process writing plain SQL: no trigger notifies, the write still reaches both workers,
and a write committed while the capture has no leader (its leader killed with SIGKILL, the lead
not yet taken over) is consumed and reaches every worker, the replacement included.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from tests.service.probes import ready_reports
from tests.support.processes import serving

from invalidation_contracts.domains import get_domain
from invalidation_contracts.server.sql import create_tables, sql_domain
from invalidation_contracts.server.sql.capture import DEFAULT_CAPTURE_SCHEMA
from invalidation_contracts.server.sql.lead import CaptureLead
from invalidation_contracts.server.sql.source import SQLSource

pytestmark = [pytest.mark.postgres]

LEAD = f"ic-ingest:{DEFAULT_CAPTURE_SCHEMA}_capture"
OLD_CHANNEL = f"{DEFAULT_CAPTURE_SCHEMA}_capture"  # what writers used to NOTIFY
LOCK_BOUND_S = 30


@pytest.fixture
def acme_postgres(postgres_url: str) -> str:
    create_tables(postgres_url, get_domain("acme_billing"))
    return postgres_url


def commit(url: str, statement: str) -> None:
    """Run ``statement`` from another process with plain psycopg (no library code)."""
    code = "import psycopg, sys\nwith psycopg.connect(sys.argv[1]) as db: db.execute(sys.argv[2])"
    subprocess.run([sys.executable, "-c", code, url, statement], check=True, timeout=60)


def rotate(code: str) -> str:
    return f"UPDATE active_csm_codes SET code = '{code}' WHERE key = 'plan_partner_growth'"


#: Both change sources: the lead and its hand-over work the same way for each.
CAPTURES = ["triggers", "logical"]


def lead_of(capture: str) -> str:
    """The advisory lock the worker leading ``capture`` holds."""
    return LEAD if capture == "triggers" else f"ic-ingest:{DEFAULT_CAPTURE_SCHEMA}_logical"


def serve_workers(stack: ExitStack, database: str, logs: Path, capture: str = "triggers") -> str:
    args = ["--domain", "acme_billing", "--database", database, "--db", database]
    args += ["--capture", capture]
    return stack.enter_context(serving([*args, "--workers", "2"], logs))


def capture_functions(url: str) -> list[str]:
    """The source of every function the capture triggers of the declared tables call."""
    tables = [table.table for table in sql_domain(get_domain("acme_billing")).sql_tables.values()]
    with psycopg.connect(url) as db:
        rows = db.execute(
            "SELECT p.prosrc FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid"
            " JOIN pg_class c ON c.oid = t.tgrelid"
            " WHERE t.tgname LIKE 'ic_capture%%' AND c.relname = ANY(%s)",
            (tables,),
        ).fetchall()
    return [str(row[0]) for row in rows]


@contextmanager
def capture_lead(url: str) -> Iterator[CaptureLead]:
    """An opened SQL source of Acme's tables and its capture lead (this process leads)."""
    source = SQLSource(url, sql_domain(get_domain("acme_billing")).sql_tables)
    try:
        source.open()
        lead = source.listener()
        assert isinstance(lead, CaptureLead)
        try:
            yield lead
        finally:
            lead.close()
    finally:
        source.close()


def leaders(reports: dict[int, dict[str, Any]]) -> list[int]:
    return [pid for pid, body in reports.items() if all(body["capture_leader"].values())]


def feed_keys(url: str) -> dict[str, int]:
    answer = httpx.get(url + "/contract/changes", params={"since": 0}, timeout=10)
    assert answer.status_code == 200, answer.text
    return {row["key"]: row["seq"] for row in answer.json()["rows"]}


def test_no_capture_trigger_sends_a_notify(acme_postgres: str) -> None:
    source = SQLSource(acme_postgres, sql_domain(get_domain("acme_billing")).sql_tables)
    try:
        source.open()
    finally:
        source.close()
    bodies = capture_functions(acme_postgres)
    assert bodies, "the capture triggers are installed"
    assert [body for body in bodies if "notify" in body.lower()] == []


def test_a_captured_write_sends_no_notification(acme_postgres: str) -> None:
    source = SQLSource(acme_postgres, sql_domain(get_domain("acme_billing")).sql_tables)
    try:
        source.open()
        with psycopg.connect(acme_postgres, autocommit=True) as listener:
            listener.execute(f'LISTEN "{OLD_CHANNEL}"')
            commit(acme_postgres, rotate("NONOTIFY1"))
            heard = list(listener.notifies(timeout=0.5))
        batch = source.read(0)
    finally:
        source.close()
    assert heard == []
    assert [(r.table, r.op, r.key) for r in batch.records] == [
        ("active_csm_codes", "upsert", '["plan_partner_growth"]')
    ]


@pytest.mark.workers
@pytest.mark.parametrize("capture", CAPTURES)
def test_a_plain_sql_write_reaches_every_worker_with_no_writer_notify(
    acme_postgres: str, tmp_path: Path, capture: str
) -> None:
    with ExitStack() as stack:
        url = serve_workers(stack, acme_postgres, tmp_path / "logs", capture)
        assert len(leaders(ready_reports(url, 2, 0))) == 1  # one worker polls the capture
        assert [b for b in capture_functions(acme_postgres) if "notify" in b.lower()] == []
        commit(acme_postgres, rotate("POLLED1"))
        reports = ready_reports(url, 2, 1)  # both workers serve the write's seq
        assert len(leaders(reports)) == 1
        assert feed_keys(url) == {"plan_partner_growth": 1}


@pytest.mark.workers
@pytest.mark.parametrize("capture", CAPTURES)
def test_a_write_committed_while_the_capture_leader_is_replaced_reaches_every_worker(
    acme_postgres: str, tmp_path: Path, capture: str
) -> None:
    with ExitStack() as stack:
        url = serve_workers(stack, acme_postgres, tmp_path / "logs", capture)
        before = ready_reports(url, 2, 0)
        [leader] = leaders(before)
        with psycopg.connect(acme_postgres, autocommit=True) as lead:
            lead.execute(f"SET lock_timeout = '{LOCK_BOUND_S}s'")
            os.kill(leader, signal.SIGKILL)
            # Hold the lead as soon as the dead leader's session lets go of it: no worker can
            # take it over, so the write below commits while the capture has no leader.
            lead.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", (lead_of(capture),))
            commit(acme_postgres, rotate("HANDOVER1"))
            commit(acme_postgres, "INSERT INTO active_csm_codes VALUES ('k_handover', 'H', 'x')")
            time.sleep(1.5)  # past a heartbeat: the workers look at the capture themselves
            lead.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (lead_of(capture),))
            after = ready_reports(url, 2, 2)
        assert leader not in after and set(after) - set(before), "a new worker replaced it"
        assert set(feed_keys(url)) == {"plan_partner_growth", "k_handover"}
        deadline = time.monotonic() + LOCK_BOUND_S
        while len(leaders(after)) != 1:  # a worker takes the lead at its next heartbeat
            assert time.monotonic() < deadline, "no worker took the capture's lead"
            time.sleep(0.2)
            after = ready_reports(url, 2, 2)
        commit(acme_postgres, rotate("HANDOVER2"))
        ready_reports(url, 2, 3)  # the new leader polls: a later write reaches both workers
        assert feed_keys(url)["plan_partner_growth"] == 3


def test_the_capture_lead_asks_for_tcp_keepalives_so_a_vanished_server_fails_a_look(
    acme_postgres: str,
) -> None:
    with capture_lead(acme_postgres) as lead:
        parameters = lead._conn.info.get_parameters()
        assert lead.leader and lead.changed()  # the first look of a new leader counts
        assert not lead.changed()  # nothing committed since
        commit(acme_postgres, rotate("LOOKED1"))
        assert lead.changed()
    assert {k: parameters.get(k) for k in ("keepalives", "keepalives_idle")} == {
        "keepalives": "1",
        "keepalives_idle": "5",
    }


def test_the_leader_sees_a_record_whose_id_was_taken_before_its_last_look(
    acme_postgres: str,
) -> None:
    """The head counts committed records: a writer that took its sequence id before a look and
    commits after it still moves the head (the sequence's last_value or max(id) would not)."""
    with capture_lead(acme_postgres) as lead:
        assert lead.changed()
        with psycopg.connect(acme_postgres) as slow:
            slow.execute(rotate("SLOW1"))  # its id is taken, not committed
            assert not lead.changed()  # nothing committed: the head stays
            commit(acme_postgres, "INSERT INTO active_csm_codes VALUES ('k_fast', 'F', 'x')")
            assert lead.changed()  # a later id, committed first
            slow.commit()
        assert lead.changed()  # the earlier id, committed after the last look


WRITER = """
import sys, time, psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as db:
    end = time.monotonic() + float(sys.argv[2])
    i = 0
    while time.monotonic() < end:
        db.execute("INSERT INTO active_csm_codes VALUES (%s, 'W', 'x')", (f"k_flow_{i:04d}",))
        i += 1
        time.sleep(0.15)
"""


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(30)


def ready_of(url: str) -> dict[str, Any] | None:
    try:
        answer = httpx.get(url + "/contract/ready", timeout=5)
    except httpx.TransportError:
        return None
    return dict(answer.json()) if answer.status_code == 200 else None


@pytest.mark.workers
def test_a_survivor_takes_the_capture_lead_while_writes_keep_flowing(
    acme_postgres: str, tmp_path: Path
) -> None:
    """Three independent ``serve`` processes; the leader dies for good while a writer commits
    every 150 ms. The two survivors' ingests keep waking each other (each commit to the registry
    NOTIFYs), so a wait may never time out: one must still take the lead within a few
    heartbeats, not only once the writes stop."""
    args = ["--domain", "acme_billing", "--database", acme_postgres, "--db", acme_postgres]
    with ExitStack() as stack:
        urls = [stack.enter_context(serving(args, tmp_path / "logs")) for _ in range(3)]
        reports = {url: ready_of(url) for url in urls}
        [leader] = [u for u, r in reports.items() if r and all(r["capture_leader"].values())]
        writer = subprocess.Popen([sys.executable, "-c", WRITER, acme_postgres, "20"])
        stack.callback(stop, writer)
        time.sleep(1.0)
        killed = reports[leader]
        assert killed is not None
        os.kill(killed["pid"], signal.SIGKILL)
        survivors = [u for u in urls if u != leader]
        deadline = time.monotonic() + 8.0  # the writer runs 20 s: the lead is taken mid-flow
        while True:
            now = [ready_of(u) for u in survivors]
            if sum(1 for r in now if r and all(r["capture_leader"].values())) == 1:
                break
            assert time.monotonic() < deadline, f"no survivor took the lead: {now}"
            time.sleep(0.1)
        assert writer.poll() is None, "the lead was taken while the writer still wrote"
        stop(writer)
        with psycopg.connect(acme_postgres) as db:
            written = {
                str(row[0])
                for row in db.execute("SELECT key FROM active_csm_codes WHERE key LIKE 'k_flow_%'")
            }
        assert written
        deadline = time.monotonic() + 30.0
        for url in survivors:  # every write, those of the hand-over included, reached both
            while not written <= set(feed_keys(url)):
                assert time.monotonic() < deadline, f"writes never reached {url}"
                time.sleep(0.2)
