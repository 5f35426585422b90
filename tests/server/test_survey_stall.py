"""A reconciliation's survey hung on a link that acknowledges but never answers (no FIN, no RST:
a proxy that stopped forwarding one flow) fails within its bound, is logged, and the next survey
runs (issue 41); so does its first step, the capture's reinstall. The provider's database is
reached through ``tests.support.relay``, which silences one backend while PostgreSQL answers it."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from tests.support.relay import Relay, unix_socket

from invalidation_contracts.server import Domain, SQLTable
from invalidation_contracts.server.sql import survey as survey_module
from invalidation_contracts.server.sql.source import SQLSource
from invalidation_contracts.server.worker.reconciler import Reconciler
from invalidation_contracts.server.worker.runtime import Runtime, open_runtime

pytestmark = pytest.mark.postgres

STALL_S = 1.5
"""The survey's bound in this test (60 s in production: above the survey's lock timeout)."""


def zones() -> Domain:
    return Domain("zoned", {"zones": SQLTable("zones")}, [], [])


@contextmanager
def relayed_zones(postgres_url: str) -> Iterator[tuple[Relay, SQLSource, Runtime]]:
    """A worker over table ``zones`` (two rows) whose provider's database it reaches through a
    relay the test can silence; closed after the block."""
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("CREATE TABLE zones (country TEXT PRIMARY KEY, zone TEXT)")
        db.execute("INSERT INTO zones VALUES ('NO', 'nordic'), ('DE', 'eu')")
    socket_dir = postgres_url.split("host=", 1)[1].split("&", 1)[0]
    with Relay(unix_socket(socket_dir)) as relay:
        source = SQLSource(relay.url(postgres_url), zones().sql_tables, reconcile_interval_s=None)
        runtime = open_runtime(zones(), store=postgres_url, database=source)
        try:
            yield relay, source, runtime
        finally:
            runtime.close()


def waiting_backend(url: str, bound_s: float = 10.0) -> int:
    """The pid of the one client backend waiting for a lock (the survey's digest read)."""
    deadline = time.monotonic() + bound_s
    with psycopg.connect(url, autocommit=True) as db:
        while time.monotonic() < deadline:
            rows = db.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = current_database()"
            ).fetchall()
            if len(rows) == 1:
                return int(rows[0][0])
            time.sleep(0.02)
    raise AssertionError("the survey never waited for the table's lock")


def test_a_survey_hung_on_a_silent_link_fails_within_its_bound_and_the_next_one_runs(
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(survey_module, "SURVEY_STALL_S", STALL_S)
    with relayed_zones(postgres_url) as (relay, source, runtime):
        with psycopg.connect(postgres_url, autocommit=True) as db:
            db.execute("ALTER TABLE zones DISABLE TRIGGER ic_capture")
            db.execute("UPDATE zones SET zone = 'bypassed' WHERE country = 'NO'")
            db.execute("ALTER TABLE zones ENABLE ALWAYS TRIGGER ic_capture")
        reconciler = Reconciler()
        with psycopg.connect(postgres_url) as migration:
            migration.execute("LOCK TABLE zones IN ACCESS EXCLUSIVE MODE")
            reconciler.start(runtime.registry, source)
            relay.forget(backend=waiting_backend(postgres_url))  # its answers vanish
        started = time.monotonic()  # the lock is released: PostgreSQL answers, unheard
        with caplog.at_level(logging.WARNING):
            reconciler.join(STALL_S + 8.0)
        assert not reconciler.running(), "the hung survey still blocks every later one"
        assert time.monotonic() - started < STALL_S + 8.0
        assert "no answer for 1.5 s" in caplog.text
        assert reconciler.pending("sql") is None
        reconciler.start(runtime.registry, source)  # the next pass runs, on a fresh flow
        reconciler.join(10.0)
        found = reconciler.pending("sql")
        assert found is not None and found.candidates == {"zones": frozenset({"NO"})}


def test_a_capture_reinstall_hung_on_a_silent_link_fails_within_the_bound_and_the_survey_runs(
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The survey's first step reinstalls a disabled trigger (``_heal``); its link hung there
    is broken at the survey's bound, logged, and the survey still finds the bypass (issue 41)."""
    monkeypatch.setattr(survey_module, "SURVEY_STALL_S", STALL_S)
    with relayed_zones(postgres_url) as (relay, source, runtime):
        with psycopg.connect(postgres_url, autocommit=True) as db:
            db.execute("ALTER TABLE zones DISABLE TRIGGER ic_capture")  # left disabled
            db.execute("UPDATE zones SET zone = 'bypassed' WHERE country = 'NO'")
        reconciler = Reconciler()
        with psycopg.connect(postgres_url) as migration:
            migration.execute("LOCK TABLE zones IN ACCESS EXCLUSIVE MODE")
            reconciler.start(runtime.registry, source)  # its heal waits for the table
            relay.forget(backend=waiting_backend(postgres_url))  # its answers vanish
        started = time.monotonic()
        with caplog.at_level(logging.WARNING):
            reconciler.join(STALL_S + 8.0)
        assert not reconciler.running(), "the hung reinstall still blocks the survey"
        assert time.monotonic() - started < STALL_S + 8.0
        assert "the change capture is not live: no answer for 1.5 s" in caplog.text
        found = reconciler.pending("sql")
        assert found is not None and found.candidates == {"zones": frozenset({"NO"})}
