"""Property: for any sequence of transactions by an outside writer, the captured change set is the
brute-force diff of the table before and after, and the registry holds exactly the table."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.server.sqldb import ProviderDB
from tests.support.postgres import PostgresCluster

from invalidation_contracts.server import Domain, SQLTable
from invalidation_contracts.server.worker.runtime import ingest, open_runtime

KEYS = [f"k{i}" for i in range(5)]

upsert = st.tuples(st.just("upsert"), st.sampled_from(KEYS), st.integers(0, 3), st.booleans())
delete = st.tuples(st.just("delete"), st.sampled_from(KEYS), st.just(0), st.just(False))
rekey = st.tuples(st.just("rekey"), st.sampled_from(KEYS), st.integers(0, 4), st.just(False))
transactions = st.lists(
    st.lists(st.one_of(upsert, delete, rekey), min_size=1, max_size=4), max_size=6
)


def statement(op: tuple[str, str, int, bool], kind: str) -> str:
    verb, key, value, flag = op
    if verb == "upsert":
        b = "'x'" if flag else "NULL"
        return (
            f"INSERT INTO t VALUES ('{key}', {value}, {b}) "
            f"ON CONFLICT (id) DO UPDATE SET a = excluded.a, b = excluded.b"
        )
    if verb == "delete":
        return f"DELETE FROM t WHERE id = '{key}'"
    target = KEYS[value]
    return f"UPDATE t SET id = '{target}' WHERE id = '{key}' AND NOT EXISTS " + (
        f"(SELECT 1 FROM t AS other WHERE other.id = '{target}')"
    )


def contents(pdb: ProviderDB) -> dict[str, dict[str, Any]]:
    return {k: {"a": a, "b": b} for k, a, b in pdb.query("SELECT id, a, b FROM t")}


def brute_diff(before: dict[str, Any], after: dict[str, Any]) -> set[tuple[str, str]]:
    out = {(k, "added") for k in after.keys() - before.keys()}
    out |= {(k, "removed") for k in before.keys() - after.keys()}
    out |= {(k, "changed") for k in before.keys() & after.keys() if before[k] != after[k]}
    return out


def check(pdb: ProviderDB, store: str, txs: list[list[tuple[str, str, int, bool]]]) -> None:
    pdb.script(
        "CREATE TABLE t (id TEXT PRIMARY KEY, a INTEGER, b TEXT)",
        "INSERT INTO t VALUES ('k0', 0, NULL)",
    )
    domain = Domain("prop", {"t": SQLTable("t")}, [], [])
    runtime = open_runtime(domain, store=store, database=pdb.url)
    try:
        reg = runtime.registry
        for tx in txs:
            before, seq = contents(pdb), reg.state.seq
            pdb.script(*(statement(op, pdb.kind) for op in tx))
            ingest(reg, runtime.sources[0])
            after = contents(pdb)
            assert reg.state.tables["t"].plain_rows() == after
            expected = brute_diff(before, after)
            feed = reg.changes(seq)
            assert {(r.key, r.op) for r in feed.rows} == expected
            assert reg.state.seq == seq + (1 if expected else 0)
    finally:
        runtime.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(txs=transactions)
def test_sqlite_capture_is_the_brute_force_diff(
    txs: list[list[tuple[str, str, int, bool]]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "provider.db"
        check(ProviderDB("sqlite", f"sqlite:///{path}", str(path)), str(Path(tmp) / "r.db"), txs)


@pytest.mark.postgres
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(txs=transactions)
def test_postgres_capture_is_the_brute_force_diff(
    postgres_cluster: PostgresCluster, txs: list[list[tuple[str, str, int, bool]]]
) -> None:
    url = postgres_cluster.database()
    try:
        check(ProviderDB("postgres", url, url), url, txs)
    finally:
        postgres_cluster.drop(url)


# -- the PostgreSQL reader's frontier, against a brute-force model of snapshots (sans-IO) ----------

lifetimes = st.lists(
    st.tuples(st.integers(0, 6), st.booleans(), st.integers(0, 3)), min_size=1, max_size=14
)


@settings(max_examples=300, deadline=None)
@given(
    lifetimes,
    st.lists(
        st.tuples(st.integers(0, 3), st.one_of(st.none(), st.integers(1, 5))),
        min_size=1,
        max_size=12,
    ),
)
def test_a_frontier_consumes_every_committed_transaction_once_and_skips_none(
    lives: list[tuple[int, bool, int]], reads: list[tuple[int, int | None]]
) -> None:
    """Transaction ``xid = i + 1`` begins at time ``i`` and ends ``span`` later (committed or
    aborted, with ``n`` records); reads come ``gap`` apart, each in a snapshot of its moment,
    with a batch limit or none. A frontier
    never counts as consumed a transaction whose records were not returned, and once every
    transaction has ended an unlimited read leaves nothing unreturned."""
    from invalidation_contracts.server.capture.records import Frontier

    ends = {i + 1: i + span + 1 for i, (span, _, _) in enumerate(lives)}
    committed = {i + 1 for i, (_, ok, _) in enumerate(lives) if ok}
    records = {x: lives[x - 1][2] for x in committed}
    frontier, returned = Frontier(1), set[int]()

    def read(now: int, limit: int | None) -> None:
        nonlocal frontier
        begun = [x for x in ends if x - 1 < now]
        xmax = max(begun, default=0) + 1
        xip = {x for x in begun if ends[x] > now}
        visible = sorted(
            x
            for x in committed
            if x < xmax and x not in xip and (x >= frontier.cursor or x in frontier.pending)
        )
        rows = [(x, r) for x in visible for r in range(records[x])]
        more = limit is not None and len(rows) >= limit
        if more:
            assert limit is not None
            last = rows[limit - 1][0]
            rows = [row for row in rows if row[0] <= last]
        returned.update(x for x, _ in rows)
        frontier = frontier.advance(xmax, xip, rows[-1][0] if more else None)
        for x in range(1, frontier.cursor):
            if x not in frontier.pending and x in committed and records[x]:
                assert x in returned, f"xid {x} counted as consumed, never returned"
            if x not in frontier.pending:
                assert ends[x] <= now, f"xid {x} counted as consumed while in progress"
        assert frontier.position <= min(xip | {xmax})

    now = 0
    for gap, limit in reads:
        now += gap
        read(now, limit)
    final = max(ends.values()) + 1
    for _ in range(len(lives) * 4):
        read(final, None)
    assert {x for x in committed if records[x]} <= returned
