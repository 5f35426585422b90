"""Writers of different tables do not serialise on one row (PostgreSQL: sequence ids, readers
resume at the snapshot's xmin and take each touched row's current image), and the capture stays
exact under concurrent writers: a brute-force check against the database itself."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator

import psycopg
import pytest
from tests.server.sqldb import ProviderDB

from invalidation_contracts.server import Domain, SQLTable
from invalidation_contracts.server.worker.runtime import Runtime, ingest, open_runtime

pytestmark = pytest.mark.postgres

KEYS = [f"k{i}" for i in range(8)]


def two_tables() -> Domain:
    return Domain("two", {"a": SQLTable("a"), "b": SQLTable("b")}, [], [])


@pytest.fixture
def worker(postgres_url: str) -> Iterator[tuple[ProviderDB, Runtime]]:
    pdb = ProviderDB("postgres", postgres_url, postgres_url)
    pdb.script(
        "CREATE TABLE a (id TEXT PRIMARY KEY, n INTEGER)",
        "CREATE TABLE b (id TEXT PRIMARY KEY, n INTEGER)",
        *(f"INSERT INTO a VALUES ('{k}', 0)" for k in KEYS),
        *(f"INSERT INTO b VALUES ('{k}', 0)" for k in KEYS),
    )
    runtime = open_runtime(two_tables(), store=postgres_url, database=postgres_url)
    yield pdb, runtime
    runtime.close()


def test_a_writer_of_one_table_is_not_blocked_by_an_open_transaction_on_another(
    worker: tuple[ProviderDB, Runtime],
) -> None:
    pdb, runtime = worker
    with psycopg.connect(pdb.raw) as open_tx:
        open_tx.execute(b"UPDATE a SET n = 1 WHERE id = 'k0'")  # captured, not committed
        with psycopg.connect(pdb.raw, autocommit=True) as other:
            other.execute(b"SET statement_timeout = '3s'")
            other.execute(b"UPDATE b SET n = 2 WHERE id = 'k0'")  # would time out on one row
        assert ingest(runtime.registry, runtime.sources[0]) is True, "b is served at once"
        assert runtime.registry.state.tables["b"].rows["k0"]["n"] == 2
        assert runtime.registry.state.tables["a"].rows["k0"]["n"] == 0, "a is not committed"
        open_tx.commit()
    ingest(runtime.registry, runtime.sources[0])
    assert runtime.registry.state.tables["a"].rows["k0"]["n"] == 1


def test_concurrent_writers_end_exactly_at_the_database_with_nothing_to_reconcile(
    worker: tuple[ProviderDB, Runtime],
) -> None:
    pdb, runtime = worker
    stop = threading.Event()
    errors: list[BaseException] = []

    def write(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with psycopg.connect(pdb.raw) as db:
                for _ in range(60):
                    with db.transaction():
                        for _ in range(rng.randint(1, 3)):
                            table, key = rng.choice("ab"), rng.choice(KEYS)
                            action = rng.random()
                            if action < 0.7:
                                db.execute(
                                    f"INSERT INTO {table} VALUES (%s, %s) ON CONFLICT (id)"
                                    " DO UPDATE SET n = excluded.n".encode(),
                                    (key, rng.randint(0, 9)),
                                )
                            else:
                                db.execute(f"DELETE FROM {table} WHERE id = %s".encode(), (key,))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def consume() -> None:
        while not stop.is_set():
            ingest(runtime.registry, runtime.sources[0])

    reader = threading.Thread(target=consume)
    reader.start()
    writers = [threading.Thread(target=write, args=(seed,)) for seed in range(4)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join(120)
    stop.set()
    reader.join(60)
    deadlock = [e for e in errors if "deadlock" not in str(e)]
    assert not deadlock, deadlock
    ingest(runtime.registry, runtime.sources[0])
    state = runtime.registry.state
    for table in "ab":
        truth = dict(pdb.query(f"SELECT id, n FROM {table}"))
        assert {k: r["n"] for k, r in state.tables[table].rows.items()} == truth
    seq = state.seq
    ingest(runtime.registry, runtime.sources[0], verify=True)
    assert runtime.registry.state.seq == seq, "the capture missed nothing: nothing to reconcile"
    feed = runtime.registry.changes(0)
    assert not any(t.reconciled for t in feed.tables)
    assert sorted({t.seq for t in feed.tables}) == list(range(1, seq + 1)), "gap-free seqs"


def test_the_head_moves_when_the_first_record_ever_commits(
    worker: tuple[ProviderDB, Runtime],
) -> None:
    pdb, runtime = worker
    source = runtime.sources[0]
    before = source.head()
    pdb.script("UPDATE a SET n = 5 WHERE id = 'k1'")
    assert source.head() != before, "a polling follower would never look at this commit"


def test_the_head_moves_when_a_record_whose_id_was_taken_before_it_was_read_commits(
    worker: tuple[ProviderDB, Runtime],
) -> None:
    pdb, runtime = worker
    source = runtime.sources[0]
    pdb.script("UPDATE b SET n = 1 WHERE id = 'k0'")
    with psycopg.connect(pdb.raw) as open_tx:
        open_tx.execute(b"UPDATE a SET n = 1 WHERE id = 'k0'")  # its capture id is taken now
        before = source.head()
        open_tx.commit()
    assert source.head() != before, "a polling follower would never look at this commit"


def test_trimming_consumed_records_leaves_the_head_where_it_was(
    worker: tuple[ProviderDB, Runtime],
) -> None:
    pdb, runtime = worker
    source = runtime.sources[0]
    pdb.script("UPDATE a SET n = 1 WHERE id = 'k0'", "UPDATE b SET n = 1 WHERE id = 'k0'")
    head = source.head()
    assert ingest(runtime.registry, source) is True  # consumes, then trims
    assert pdb.query("SELECT count(*) FROM invalidation_contracts.capture") == [(0,)]
    assert source.head() == head, "a follower that saw this head has nothing new to read"
