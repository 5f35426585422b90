"""Study — capture consumer cost (issue 41): what consuming one captured transaction costs the
registry, against the length of the change log it already holds.

Setup: a registry (one table of 1,000 rows) restored with a change log of L records (0, 1k, 10k,
100k; the log's capacity is L). Each captured transaction is applied the way ``ingest`` applies
it: ``CapturedTransaction.changes`` then ``RegistryTransaction.apply``, in one registry
transaction per batch of them. Two kinds: a *change* (one row gets a new value: a version bump,
which must skip every version the table had in the epoch) and a *no-op* (the re-read current
image, as most of a backlog is once ``current_images`` replaced each record's image). The
baseline, in the same run, is the scan the consumer did before (every log record's transitions,
copied and scanned per change set: ``_scan_served``). The target is a flat cost: the slope of
log(cost) against log(L) over 1k…100k at most 0.1.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from invalidation_contracts.protocol.models import TableTransition
from invalidation_contracts.server.capture.records import CapturedTransaction
from invalidation_contracts.server.changelog import LogRecord
from invalidation_contracts.server.registry import Registry, RegistryTransaction, initial_state
from invalidation_contracts.server.tables import Snapshot
from invalidation_contracts.server.transitions import apply_changes

from .common import Check, StudyResult, markdown_table

NAME = "consumer"
TITLE = "Capture consumer: cost per captured transaction against the change log's length"
ROWS = 1_000


@dataclass(frozen=True, slots=True)
class Size:
    lengths: tuple[int, ...]
    transactions: int
    baseline_transactions: int
    backlog: int


FULL = Size(
    lengths=(0, 1_000, 10_000, 100_000),
    transactions=2_000,
    baseline_transactions=40,
    backlog=100_000,
)
QUICK = Size(lengths=(0, 1_000, 10_000), transactions=300, baseline_transactions=10, backlog=500)
REPEATS = 3
"""Runs per cell, the median reported: one run of 2,000 transactions (about 0.25 s) can take a
collector pass over a 100,000-record log or a pause of this shared machine (one did: 264 µs
against 120 µs in the two runs beside it)."""


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    size = QUICK if quick else FULL
    costs: dict[str, dict[int, float]] = {}
    for kind in ("change", "no-op"):
        for served in ("index", "scan (before)"):
            count = size.transactions if served == "index" else size.baseline_transactions
            costs[f"{kind}, {served}"] = {
                length: statistics.median(
                    _per_transaction(length, kind, served, count) for _ in range(REPEATS)
                )
                for length in size.lengths
            }
    rows = [
        [label, *(f"{costs[label][length] * 1e6:,.1f}" for length in size.lengths)]
        for label in costs
    ]
    slopes = {label: _slope(series) for label, series in costs.items()}
    md = (
        f"One table of {ROWS:,} rows; µs per captured transaction applied as `ingest` applies it, "
        f"with a change log of L records already held ({size.transactions:,} transactions per "
        f"cell; the scan {size.baseline_transactions}; each cell the median of {REPEATS} runs,"
        " a pause of the collector or of the machine falling in one of them). Log-log slope over"
        " L ≥ 1,000 beside "
        "each line:\n\n"
        + markdown_table(
            [
                "captured transaction, served versions by",
                *(f"L = {length:,}" for length in size.lengths),
                "log-log slope",
            ],
            [[*row, f"{slopes[row[0]]:.2f}"] for row in rows],
        )
    )
    top = size.lengths[-1]
    checks = [
        Check(
            f"per-transaction cost flat in the log's length ({kind}): log-log slope ≤ 0.1",
            f"slope {slopes[f'{kind}, index']:.2f}; at L = {top:,} "
            f"{costs[f'{kind}, scan (before)'][top] / costs[f'{kind}, index'][top]:,.0f}× "
            "cheaper than the scan",
            slopes[f"{kind}, index"] <= 0.1,
        )
        for kind in ("change", "no-op")
    ]
    backlog = _backlog(size.backlog)
    md += (
        f"\n\nA backlog of {size.backlog:,} single-row transactions (committed by a procedure in "
        "another session while the worker's follower was not yet started) consumed by the "
        f"worker's follower on PostgreSQL in batches of {backlog['batch']:,} records "
        f"({backlog['batches_seen']:,} batch positions seen of about {backlog['batches']:,}): "
        f"**{backlog['seconds']:.1f} s** to ready and serving the last write "
        f"({size.backlog / backlog['seconds']:,.0f} transactions/s), "
        f"{backlog['stalls']:.0f} watchdog breaks, no restart; it said not ready while catching "
        f"up ({backlog['not_ready_samples']:,} of the 5 ms samples) and ready again by itself."
    )
    checks.append(
        Check(
            "a backlog is consumed by a running worker, which is ready again by itself",
            f"{size.backlog:,} transactions in {backlog['seconds']:.1f} s, "
            f"{backlog['stalls']} watchdog breaks",
            backlog["stalls"] == 0,
        )
    )
    data = {"seconds": costs, "slopes": slopes, "backlog": backlog}
    return StudyResult(NAME, TITLE, md, checks, [], data)


BACKLOG = """
CREATE PROCEDURE ic_backlog(n integer) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        UPDATE items SET n = i WHERE id = 'k' || (i % 1000);
        COMMIT;
    END LOOP;
END $$"""


def _backlog(count: int) -> dict[str, float]:
    """Commit ``count`` single-row transactions while a worker's follower is stopped, start it,
    and time until it is ready and serves the last one."""
    import psycopg
    from tests.support.postgres import PostgresCluster

    from invalidation_contracts.server import Domain, SQLTable
    from invalidation_contracts.server.sql.source import DEFAULT_BATCH_RECORDS, SQLSource
    from invalidation_contracts.server.worker.runtime import open_runtime

    cluster = PostgresCluster.start()
    try:
        database = cluster.database()
        with psycopg.connect(database, autocommit=True) as pg:
            pg.execute("CREATE TABLE items (id TEXT PRIMARY KEY, n INTEGER)")
            pg.execute("INSERT INTO items SELECT 'k' || i, 0 FROM generate_series(0, 999) AS i")
        domain = Domain("consumer", {"items": SQLTable("items")}, [], [])
        source = SQLSource(database, domain.sql_tables)
        runtime = open_runtime(domain, store=database, database=source)
        try:
            with psycopg.connect(database, autocommit=True) as pg:
                pg.execute(BACKLOG)
                pg.execute("SET synchronous_commit = off")  # commits as fast as the server can
                pg.execute("CALL ic_backlog(%s)", (count,))
            last = f"k{count % 1000}"
            start = time.perf_counter()
            runtime.start()
            waiting: set[int] = set()  # the backlogs the worker reported: one per batch seen
            not_ready = 0
            while True:
                health = runtime.health()
                waiting.update(n for n in health.backlog.values() if n)
                not_ready += not health.ready
                row = runtime.registry.state.tables["items"].rows.get(last)
                if health.ready and row is not None and row["n"] == count:
                    break
                if time.perf_counter() - start > 1800.0:
                    raise TimeoutError(f"a backlog of {count:,} was not consumed in 30 minutes")
                time.sleep(0.005)
            seconds = time.perf_counter() - start
            stalls = runtime.follower.stalls if runtime.follower is not None else 0
        finally:
            runtime.close()
    finally:
        cluster.stop()
    return {
        "seconds": seconds,
        "batches": math.ceil(count / DEFAULT_BATCH_RECORDS),
        "batches_seen": len(waiting),
        "batch": DEFAULT_BATCH_RECORDS,
        "stalls": stalls,
        "not_ready_samples": not_ready,
    }


def _registry(length: int) -> Registry:
    """A registry whose log holds ``length`` records of version moves of table ``t``."""
    rows = {f"k{i}": {"v": 0} for i in range(ROWS)}
    records = [
        LogRecord(
            seq=i + 1,
            transitions=(
                TableTransition(
                    seq=i + 1, table="t", old_version=f"1.{i}.0", new_version=f"1.{i + 1}.0"
                ),
            ),
        )
        for i in range(length)
    ]
    start = initial_state([Snapshot.build("t", f"1.{length}.0", rows)], epoch="e")
    state = type(start)(
        tables=start.tables,
        rules=start.rules,
        graph=start.graph,
        seq=length,
        epoch="e",
        changed_at=start.changed_at,
    )
    return Registry.restore(state, records, floor=0, log_capacity=max(1, length))


def _scan_served(tx: RegistryTransaction, log: Registry) -> Callable[[str], Collection[str]]:
    """The consumer's served versions as computed before issue 41: the whole log, scanned."""

    def served(table: str) -> set[str]:
        records = [*log.log.records(), *tx.records]
        versions = {tx.base.snapshot(table).version} if table in tx.base.tables else set()
        for record in records:
            for move in record.transitions:
                if move.table == table:
                    versions.update((move.old_version, move.new_version or ""))
        return versions

    return served


def _per_transaction(length: int, kind: str, served: str, count: int) -> float:
    registry = _registry(length)
    sets = [
        CapturedTransaction({"t": {f"k{i % ROWS}": {"v": i + 1 if kind == "change" else 0}}})
        for i in range(count)
    ]
    start = time.perf_counter()
    with registry.transaction() as tx:
        lookup: Any = tx.served if served == "index" else _scan_served(tx, registry)
        for change_set in sets:
            changes = change_set.changes(tx.state.tables, lookup)
            if served == "index":
                tx.apply(changes)
            else:  # before issue 41, every table of every change set was looked up first
                for name in changes:
                    lookup(name)
                applied = apply_changes(tx.state, changes, lookup)
                tx.state = applied.state
                if applied.record is not None:
                    tx.records.append(applied.record)
    return (time.perf_counter() - start) / count


def _slope(series: dict[int, float]) -> float:
    """Least-squares slope of log(cost) on log(L) over the lengths ≥ 1,000."""
    points = [(math.log(n), math.log(c)) for n, c in series.items() if n >= 1_000]
    if len(points) < 2:
        return 0.0
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    num = sum((x - mx) * (y - my) for x, y in points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return num / den
