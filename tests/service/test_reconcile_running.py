"""A large table reconciled while the workers serve (issue 41, fault and change suite).

``serve --workers 2`` on PostgreSQL over a declared table of ``ROWS`` rows (``generate_series``;
1M in ``benchmarks/reconcile_running.py``) with ``--reconcile-interval 1``. A write around the
capture (its trigger disabled for the transaction) is found by the leader's survey (digest, then
the table streamed in chunks, outside the registry's lock and the follower's stall bound) and
reconciled as one change set holding exactly that row, while a client asking every worker all
along gets no 503. A migration then holds the table's ACCESS EXCLUSIVE lock for a few seconds
while a reconciliation is due: a write to another table reaches every worker meanwhile, and still
no request is answered 503.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import psycopg
import pytest
from tests.service.probes import Probe, ready_reports
from tests.service.test_follower_faults import commit, rotate
from tests.support.postgres import PostgresCluster
from tests.support.processes import serving

from invalidation_contracts.domains import get_domain
from invalidation_contracts.server.sql import create_tables

# Two workers over a 20k-row table (start-up reads it twice each): a study (CI runs them too).
pytestmark = [pytest.mark.postgres, pytest.mark.workers, pytest.mark.study]

ROWS = 20_000
TABLE = "token_funding_map"
BYPASSED = "k7777"
REPAIR_BOUND_S = 30.0


def bypass(url: str, statement: str) -> None:
    """``statement`` with the table's capture trigger disabled for its transaction."""
    with psycopg.connect(url) as db:
        db.execute(f"ALTER TABLE {TABLE} DISABLE TRIGGER ic_capture")
        db.execute(statement)
        db.execute(f"ALTER TABLE {TABLE} ENABLE ALWAYS TRIGGER ic_capture")


def changes_since(url: str, seq: int) -> list[tuple[str, str, str]]:
    answer = httpx.get(url + "/contract/changes", params={"since": seq}, timeout=10)
    assert answer.status_code == 200, answer.text
    return [(r["table"], r["key"], r["op"]) for r in answer.json()["rows"]]


def seq_of(url: str) -> int:
    return int(httpx.get(url + "/contract/versions", timeout=10).json()["contract_seq"])


@pytest.fixture(scope="module")
def served(
    postgres_cluster: PostgresCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, str]]:
    """(database URL, server URL): two workers over a ``ROWS``-row declared table."""
    database = postgres_cluster.database()
    create_tables(database, get_domain("acme_billing"))
    with psycopg.connect(database) as db:
        db.execute(
            f"INSERT INTO {TABLE} (key, funding, network, issuer, expires)"
            " SELECT 'k' || i, 'credit', 'visa', 'Issuer ' || (i % 97), '2030-01'"
            f" FROM generate_series(1, {ROWS}) AS i"
        )
    args = ["--domain", "acme_billing", "--database", database, "--db", database]
    logs = tmp_path_factory.mktemp("logs")
    try:
        with serving([*args, "--workers", "2", "--reconcile-interval", "1"], logs) as url:
            ready_reports(url, 2, 0)
            yield database, url
    finally:
        postgres_cluster.drop(database)


def test_a_bypassed_write_in_a_large_table_is_reconciled_exactly_with_no_503(
    served: tuple[str, str],
) -> None:
    database, url = served
    before = seq_of(url)
    with Probe(url) as probe:
        bypass(database, f"UPDATE {TABLE} SET issuer = 'Bypassed' WHERE key = '{BYPASSED}'")
        deadline = time.monotonic() + REPAIR_BOUND_S
        while seq_of(url) == before:
            assert time.monotonic() < deadline, "the bypassed write was never reconciled"
            time.sleep(0.1)
        ready_reports(url, 2, before + 1)
        time.sleep(1.5)  # the next surveys (the table verified again) while probed
    assert changes_since(url, before) == [(TABLE, BYPASSED, "changed")]
    assert [s for s in probe.seen if s.status == 503] == []
    assert len(probe.seen) > 20


def test_a_migration_lock_on_the_large_table_is_waited_out_with_no_503(
    served: tuple[str, str],
) -> None:
    database, url = served
    before = seq_of(url)
    with Probe(url) as probe:
        bypass(database, f"UPDATE {TABLE} SET issuer = 'Again' WHERE key = '{BYPASSED}'")
        with psycopg.connect(database) as migration:
            migration.execute(f"LOCK TABLE {TABLE} IN ACCESS EXCLUSIVE MODE")
            locked = time.monotonic()
            commit(database, rotate("DURING-MIGRATION"))  # another table's write
            ready_reports(url, 2, before + 1)
            assert time.monotonic() - locked < 3.0, "a write elsewhere waited for the migration"
            time.sleep(max(0.0, 4.0 - (time.monotonic() - locked)))  # surveys wait meanwhile
            migration.execute(f"UPDATE {TABLE} SET expires = '2031-01' WHERE key = 'k1'")
        ready_reports(url, 2, before + 2)
        deadline = time.monotonic() + REPAIR_BOUND_S
        while seq_of(url) < before + 3:  # the bypass, reconciled once the lock is gone
            assert time.monotonic() < deadline, "the bypassed write was never reconciled"
            time.sleep(0.1)
    assert sorted(changes_since(url, before)) == sorted(
        [
            ("active_csm_codes", "plan_partner_growth", "changed"),
            (TABLE, "k1", "changed"),
            (TABLE, BYPASSED, "changed"),
        ]
    )
    assert [s for s in probe.seen if s.status == 503] == []
