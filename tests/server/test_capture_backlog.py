"""A capture backlog is consumed in bounded batches, each committed (progress survives a broken
round), and a long transaction elsewhere in the cluster does not make every read start over from
the position it holds back (real PostgreSQL)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from tests.support.postgres import PostgresCluster

from invalidation_contracts.server import Domain, SQLTable
from invalidation_contracts.server.sql.source import SQLSource
from invalidation_contracts.server.worker.runtime import Runtime, ingest, open_runtime

pytestmark = pytest.mark.postgres

CAPTURE = "invalidation_contracts.capture"
DOMAIN = Domain("backlog", {"items": SQLTable("items")}, [], [])


@pytest.fixture
def database(postgres_url: str) -> str:
    with psycopg.connect(postgres_url, autocommit=True) as pg:
        pg.execute("CREATE TABLE items (id TEXT PRIMARY KEY, n INTEGER)")
        pg.execute("INSERT INTO items SELECT 'k' || i, 0 FROM generate_series(0, 49) AS i")
    return postgres_url


def open_worker(database: str, batch: int, **config: float) -> Runtime:
    source = SQLSource(database, DOMAIN.sql_tables, batch_records=batch)
    return open_runtime(DOMAIN, store=database, database=source, **config)


def commit_each(database: str, count: int, start: int = 1) -> None:
    """``count`` single-row transactions, each its own commit (a writer committing row by row)."""
    with psycopg.connect(database, autocommit=True) as pg:
        for i in range(start, start + count):
            pg.execute("UPDATE items SET n = %s WHERE id = %s", (i, f"k{i % 50}"))


def database_rows(database: str) -> dict[str, int]:
    with psycopg.connect(database) as pg:
        return dict(pg.execute("SELECT id, n FROM items").fetchall())


def served_rows(runtime: Runtime) -> dict[str, int]:
    rows = runtime.registry.state.tables["items"].plain_rows()
    return {key: row["n"] for key, row in rows.items()}


@pytest.fixture
def held_elsewhere(postgres_cluster: PostgresCluster) -> Iterator[None]:
    """A transaction holding an xid in another database of the cluster (an idle-in-transaction
    session, a pg_dump): the cluster-wide xmin stays at it while it lasts."""
    other = postgres_cluster.database()
    with psycopg.connect(other) as pg:
        pg.execute("CREATE TABLE t (x int)")
        pg.commit()
        pg.execute("INSERT INTO t VALUES (1)")  # takes an xid; left open
        yield
        pg.rollback()


def test_a_backlog_is_consumed_in_batches_that_each_commit(database: str) -> None:
    runtime = open_worker(database, batch=20)
    try:
        commit_each(database, 300)
        seqs: list[int] = []
        waiting: list[int | None] = []

        def progress(left: int | None) -> None:
            seqs.append(runtime.registry.state.seq)  # committed and visible already
            waiting.append(left)

        assert ingest(runtime.registry, runtime.sources[0], progress=progress) is True
        assert len(seqs) >= 300 // 25, "one registry transaction per batch"
        # the first batch is served before the rest is read (later ones re-read current images)
        assert seqs == sorted(seqs) and 0 < seqs[0] <= runtime.registry.state.seq
        assert all(isinstance(n, int) for n in waiting) and waiting == sorted(waiting, reverse=True)
        assert served_rows(runtime) == database_rows(database)
    finally:
        runtime.close()


def test_a_batch_never_splits_a_transaction(database: str) -> None:
    runtime = open_worker(database, batch=7)
    try:
        with psycopg.connect(database) as pg:  # one transaction of 50 rows: one change set
            pg.execute("UPDATE items SET n = n + 1000")
        before = runtime.registry.state.seq
        ingest(runtime.registry, runtime.sources[0])
        assert runtime.registry.state.seq == before + 1
        assert served_rows(runtime) == database_rows(database)
    finally:
        runtime.close()


@pytest.mark.usefixtures("held_elsewhere")
def test_a_long_transaction_in_another_database_does_not_make_reads_start_over(
    database: str,
) -> None:
    runtime = open_worker(database, batch=1000)
    source = runtime.sources[0]
    try:
        commit_each(database, 40)
        assert ingest(runtime.registry, source) is True
        position = runtime.registry.position(source.name)
        again = source.read(position)
        assert again.records == (), "what was consumed is not read again"
        (left,) = psycopg.connect(database).execute(f"SELECT count(*) FROM {CAPTURE}").fetchone()
        assert left == 0, "consumed records are trimmed though the cluster's xmin is held"
        commit_each(database, 5, start=100)
        assert ingest(runtime.registry, source) is True
        assert served_rows(runtime) == database_rows(database)
    finally:
        runtime.close()


@pytest.mark.usefixtures("held_elsewhere")
def test_another_worker_resumes_soundly_from_the_held_back_position(database: str) -> None:
    first = open_worker(database, batch=10)
    try:
        commit_each(database, 60)
        ingest(first.registry, first.sources[0])
        commit_each(database, 30, start=500)
        second = open_worker(database, batch=10)  # no frontier of its own: from the position
        try:
            ingest(second.registry, second.sources[0])
            assert served_rows(second) == database_rows(database)
            ingest(first.registry, first.sources[0])
            assert served_rows(first) == database_rows(database)
        finally:
            second.close()
    finally:
        first.close()


def test_a_running_worker_catches_up_says_so_and_serves_again_by_itself(database: str) -> None:
    runtime = open_worker(database, batch=3, max_lag_s=1.0, heartbeat_s=0.5)
    try:
        commit_each(database, 400)  # waiting when the follower starts
        runtime.start()
        seen: set[str] = set()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            health = runtime.health()
            seen.add(str(health.state))
            if health.backlog:
                assert health.state == "catching-up"
            if health.ready and served_rows(runtime) == database_rows(database):
                break
            time.sleep(0.01)
        else:
            pytest.fail(f"not caught up in 120 s: {runtime.health()}")
        assert "catching-up" in seen
        assert runtime.follower is not None and runtime.follower.stalls == 0
    finally:
        runtime.close()


def test_a_burst_over_a_full_log_leaves_the_running_worker_ready_in_the_same_epoch(
    database: str,
) -> None:
    """The fault suite's burst: the change log at capacity, then 300 single-row commits while the
    worker runs; it consumes them all and is ready again by itself, in the same history."""
    runtime = open_worker(database, batch=50, log_capacity=20, max_lag_s=1.0, heartbeat_s=0.5)
    try:
        runtime.start()
        commit_each(database, 30)  # the log is full

        def caught_up() -> bool:
            return runtime.health().ready and served_rows(runtime) == database_rows(database)

        eventually(caught_up)
        epoch, seq = runtime.registry.state.epoch, runtime.registry.state.seq
        commit_each(database, 300, start=1000)
        eventually(caught_up)
        state = runtime.registry.state
        assert state.epoch == epoch and state.seq == seq + 300, "one change set per commit"
        assert runtime.follower is not None and runtime.follower.stalls == 0
    finally:
        runtime.close()


def eventually(predicate: Callable[[], bool], bound_s: float = 60.0) -> None:
    deadline = time.monotonic() + bound_s
    while not predicate():
        assert time.monotonic() < deadline, "not within the bound"
        time.sleep(0.02)


def test_records_of_a_table_this_worker_does_not_declare_are_skipped(database: str) -> None:
    """A newer version declares a second table (``db upgrade`` installed its capture): this
    worker's rounds skip its records and keep serving its own tables."""
    with psycopg.connect(database, autocommit=True) as pg:
        pg.execute("CREATE TABLE embargoes (id TEXT PRIMARY KEY, reason TEXT)")
    runtime = open_worker(database, batch=100)
    newer = SQLSource(database, {"items": SQLTable("items"), "embargoes": SQLTable("embargoes")})
    try:
        newer.open()  # installs the capture on embargoes, as `db upgrade` does
        with psycopg.connect(database, autocommit=True) as pg:
            pg.execute("INSERT INTO embargoes VALUES ('ru', 'sanctions')")
            pg.execute("UPDATE items SET n = 7 WHERE id = 'k1'")
        assert ingest(runtime.registry, runtime.sources[0]) is True
        assert served_rows(runtime)["k1"] == 7
        assert set(runtime.registry.state.tables) == {"items"}
    finally:
        newer.close()
        runtime.close()
