"""The capture lead's connection is killed (issue 41, fault and change suite: dropped lead).

``serve --workers 2`` on PostgreSQL; the backend of the capture lead's connection (the one
holding the lead's session advisory lock) is ended with ``pg_terminate_backend`` and a plain-SQL
write commits at once, while nobody leads. The lead is taken again by itself within a few
heartbeats (a new backend holds it), the write committed in the gap reaches both workers (nothing
lost), no worker serves a stamp older than it past the lag bound, every worker ends ready, and a
later write is polled by the new leader.

The lead's connection is also dropped silently: through a loopback relay that stops forwarding
that one connection in both directions without closing either socket (no FIN, no RST; the relay
acknowledges what it no longer forwards, so no TCP timer on either end fires). The server ends the
lead's idle session (``idle_session_timeout``), the leader's look gives up after
``LOOK_TIMEOUT_S``, and another worker holds the lead within ``SILENT_RETAKE_BOUND_S``, with
nothing lost and no unverified stamp.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import psycopg
import pytest
from tests.service.probes import Probe, ready_reports
from tests.service.test_capture_polling import feed_keys, leaders
from tests.service.test_follower_faults import commit, rotate
from tests.support.processes import serving
from tests.support.relay import Relay, unix_socket

from invalidation_contracts.domains import get_domain
from invalidation_contracts.server.sql import create_tables
from invalidation_contracts.server.sql.lead import LEAD_IDLE_TIMEOUT_S, LOOK_TIMEOUT_S
from invalidation_contracts.server.store.postgres import LISTENER_APPLICATION_NAME
from invalidation_contracts.server.worker.follower import DEFAULT_MAX_LAG_S

# Two worker processes and two lag-bound waits: ~20 s under load, so a study (CI runs them too).
pytestmark = [pytest.mark.postgres, pytest.mark.workers, pytest.mark.study]

RETAKE_BOUND_S = 5.0
"""How soon the lead must be held again (a few heartbeats; before, a silently dropped lead
waited for PostgreSQL's two-hour keepalive)."""
SILENT_RETAKE_BOUND_S = LEAD_IDLE_TIMEOUT_S + LOOK_TIMEOUT_S + 4.0
"""A silently dropped lead: the server ends the idle session, then a bid (once a heartbeat)."""


def lead_backends(url: str) -> list[int]:
    """The backends holding a session advisory lock on a worker's listener connection: the
    capture lead (registry writers take transaction-level locks on other connections)."""
    with psycopg.connect(url, autocommit=True) as db:
        rows = db.execute(
            "SELECT DISTINCT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = %s",
            (LISTENER_APPLICATION_NAME,),
        ).fetchall()
    return [int(row[0]) for row in rows]


def terminate(url: str, backend: int) -> None:
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("SELECT pg_terminate_backend(%s)", (backend,))


def test_a_killed_lead_connection_is_retaken_by_itself_and_nothing_is_lost(
    postgres_url: str, tmp_path: Path
) -> None:
    create_tables(postgres_url, get_domain("acme_billing"))
    args = ["--domain", "acme_billing", "--database", postgres_url, "--db", postgres_url]
    with ExitStack() as stack:
        url = stack.enter_context(serving([*args, "--workers", "2"], tmp_path / "logs"))
        reports = ready_reports(url, 2, 0)
        assert len(leaders(reports)) == 1
        seq = 0
        with Probe(url) as probe:
            for round_ in (1, 2):  # the re-taken lead is killed again
                [backend] = lead_backends(postgres_url)
                terminate(postgres_url, backend)
                committed = commit(postgres_url, rotate(f"DROPPED{round_}"))
                seq += 1
                deadline = time.monotonic() + RETAKE_BOUND_S
                while True:
                    held = lead_backends(postgres_url)
                    if held and held != [backend]:
                        break
                    assert time.monotonic() < deadline, "nobody took the capture lead again"
                    time.sleep(0.05)
                reports = ready_reports(url, 2, seq)  # the write of the gap reached both
                assert len(leaders(reports)) == 1
                time.sleep(DEFAULT_MAX_LAG_S + 0.3)
                assert probe.unverified(committed, seq) == []
        assert feed_keys(url) == {"plan_partner_growth": seq}
        commit(postgres_url, rotate("AFTER"))
        ready_reports(url, 2, seq + 1)  # the new leader polls: a later write reaches both


def test_a_silently_dropped_lead_connection_is_retaken_within_seconds_and_nothing_is_lost(
    postgres_url: str, tmp_path: Path
) -> None:
    create_tables(postgres_url, get_domain("acme_billing"))
    socket_dir = postgres_url.split("host=", 1)[1].split("&", 1)[0]
    with ExitStack() as stack:
        relay = stack.enter_context(Relay(unix_socket(socket_dir)))
        through = relay.url(postgres_url)
        args = ["--domain", "acme_billing", "--database", through, "--db", through]
        url = stack.enter_context(serving([*args, "--workers", "2"], tmp_path / "logs"))
        assert len(leaders(ready_reports(url, 2, 0))) == 1
        with Probe(url) as probe:
            [backend] = lead_backends(postgres_url)
            assert backend in relay.backends()
            relay.forget(backend=backend)  # that one flow goes silent; new ones pass
            dropped = time.monotonic()
            committed = commit(postgres_url, rotate("SILENT"))
            while True:
                held = lead_backends(postgres_url)
                if held and held != [backend]:
                    break
                waited = time.monotonic() - dropped
                assert waited < SILENT_RETAKE_BOUND_S, "nobody took the capture lead again"
                time.sleep(0.05)
            reports = ready_reports(url, 2, 1)  # the write of the gap reached both
            assert len(leaders(reports)) == 1
            time.sleep(DEFAULT_MAX_LAG_S + 0.3)
            assert probe.unverified(committed, 1) == []
        assert feed_keys(url) == {"plan_partner_growth": 1}
        commit(postgres_url, rotate("AFTER"))
        ready_reports(url, 2, 2)  # the new leader polls: a later write reaches both
