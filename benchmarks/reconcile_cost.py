"""Study — reconciliation cost (issue 21): how long one reconciliation pass takes per 100,000
rows, and what share of one worker's CPU it is at the default interval.

Setup: one declared table made and filled with plain SQL (``CREATE TABLE`` and one ``INSERT``),
opened by the library's ``SQLSource`` (capture installed). A *pass* is what the capture's leader
does every ``reconcile_interval_s``: ``SQLSource.read(head, full=True, marks=...)`` and, for every
table read, ``Snapshot.build`` and the comparison with the registry's snapshot. On PostgreSQL the
table's digest is computed in the database and, when it equals the one verified at the registry's
mark, the table is not read (*digest path*); otherwise it is read in full (*full read*). SQLite
has no digest: every pass is a full read. Each figure is the median of ``repeats`` passes; the
CPU share is the pass time over the default interval (the pass runs in the leading worker).
"""

from __future__ import annotations

import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from invalidation_contracts.server import SQLTable
from invalidation_contracts.server.sql.source import DEFAULT_RECONCILE_INTERVAL_S, SQLSource

from .common import Check, StudyResult, markdown_table

NAME = "reconcile"
TITLE = "Reconciliation: time per 100,000 rows and share of a worker's CPU"
MARK = "epoch/v1"
PER = 100_000


@dataclass(frozen=True, slots=True)
class Size:
    rows: int
    repeats: int


FULL = Size(rows=100_000, repeats=5)
QUICK = Size(rows=10_000, repeats=2)
TABLES = {"items": SQLTable("items", key="id", columns=["label", "amount"])}


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    size = QUICK if quick else FULL
    timings: dict[str, float] = {}
    timings.update(_sqlite(size))
    timings.update(_postgres(size))
    scale = PER / size.rows
    rows = [
        [
            label,
            f"{seconds * 1000:.1f}",
            f"{seconds * scale:.3f}",
            f"{seconds * scale / DEFAULT_RECONCILE_INTERVAL_S * 100:.3f} %",
        ]
        for label, seconds in timings.items()
    ]
    md = (
        f"One declared table of {size.rows:,} rows (plain SQL), opened by `SQLSource`; median of "
        f"{size.repeats} passes. CPU share: a pass per 100,000 rows over the default interval "
        f"({DEFAULT_RECONCILE_INTERVAL_S:g} s), in the worker leading the capture:\n\n"
        + markdown_table(
            [
                "pass",
                f"time at {size.rows:,} rows (ms)",
                "s per 100,000 rows",
                "share of one worker's CPU per 100,000 rows",
            ],
            rows,
        )
    )
    digest_ratio = (
        timings["PostgreSQL, digest path (unchanged table)"] / timings["PostgreSQL, full read"]
    )
    checks = [
        Check(
            "PostgreSQL: an unchanged table is verified by its digest, cheaper than reading it",
            f"{digest_ratio:.2f}× the full read",
            digest_ratio < 1.0,
        )
    ]
    return StudyResult(NAME, TITLE, md, checks, [], {"rows": size.rows, "seconds": timings})


def _pass(source: SQLSource, marks: dict[str, str] | None) -> Callable[[], Any]:
    """One reconciliation pass as the leader runs it: read, then build and compare snapshots."""
    loaded, _ = source.load()

    def once() -> Any:
        batch = source.read(source.head(), full=True, marks=marks)
        assert batch.contents is not None
        for name, rows in batch.contents.items():
            current = loaded[name]
            if not source.snapshot(name, current.version, rows).same_content(current):
                raise AssertionError(f"{name} differs from what was loaded")
        return batch

    return once


def _median(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _sqlite(size: Size) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="reconcile-") as work:
        path = Path(work) / "shop.db"
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE items (id TEXT PRIMARY KEY, label TEXT, amount INTEGER)")
            db.executemany(
                "INSERT INTO items VALUES (?, ?, ?)",
                ((f"item-{i:07d}", f"label {i}", i) for i in range(size.rows)),
            )
        source = SQLSource(f"sqlite:///{path}", TABLES)
        source.open()
        try:
            return {"SQLite, full read": _median(_pass(source, None), size.repeats)}
        finally:
            source.close()


def _postgres(size: Size) -> dict[str, float]:
    import psycopg
    from tests.support.postgres import PostgresCluster

    cluster = PostgresCluster.start()
    try:
        database = cluster.database()
        with psycopg.connect(database) as db:
            db.execute("CREATE TABLE items (id TEXT PRIMARY KEY, label TEXT, amount INTEGER)")
            db.execute(
                "INSERT INTO items SELECT 'item-' || lpad(i::text, 7, '0'), 'label ' || i, i"
                " FROM generate_series(0, %s) AS i",
                (size.rows - 1,),
            )
        source = SQLSource(database, TABLES)
        source.open()
        try:
            full = _median(_pass(source, None), size.repeats)
            batch = source.read(source.head(), full=True)
            source.mark_verified({n: (d, MARK) for n, d in batch.digests.items()})
            marks = {name: MARK for name in TABLES}
            digest_pass = _pass(source, marks)
            skipped = digest_pass().skipped
            if skipped != frozenset(TABLES):
                raise AssertionError(f"the digest path read tables it should skip: {skipped}")
            digest = _median(digest_pass, size.repeats)
        finally:
            source.close()
    finally:
        cluster.stop()
    return {"PostgreSQL, digest path (unchanged table)": digest, "PostgreSQL, full read": full}
