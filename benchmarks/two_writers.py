"""Study — two writers on two tables (issue 21): the throughput of plain-SQL writers with the
change capture installed against the same writers without it, and whether a writer waits on an
open transaction on the *other* table.

Setup: one embedded PostgreSQL, two databases made with plain SQL (``orders_a`` and ``orders_b``,
``ROWS`` rows each, the same in both). The *captured* database is opened once by the library's
``SQLSource`` (triggers installed on both tables, as ``serve`` does at start); the *uncaptured*
one never is. A round: two writer processes, one per table, each ``UPDATE ... SET amount =
amount + 1 WHERE id = <random>`` in autocommit for ``seconds``; the figure is their total commits
per second. Rounds alternate uncaptured / captured so both see the same machine; the ratio is of
the medians. *Waits*: a third process opens a transaction that updates one row of ``orders_b`` and
holds it open; meanwhile the writer on ``orders_a`` times ``updates`` single-row UPDATEs
(``statement_timeout`` bounds each); the same is timed with nothing held, in both databases.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from invalidation_contracts.server import SQLTable

from .common import Check, StudyResult, _commit, markdown_table, postgres_cluster

NAME = "two_writers"
TITLE = "Two writers on two tables: capture throughput and cross-table waits"
TABLES = ("orders_a", "orders_b")
STATEMENT_TIMEOUT_MS = 2000


@dataclass(frozen=True, slots=True)
class Size:
    rows: int
    seconds: float
    rounds: int
    updates: int


FULL = Size(rows=10_000, seconds=5.0, rounds=3, updates=500)
QUICK = Size(rows=1_000, seconds=1.0, rounds=1, updates=50)


def _cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _writer(url: str, table: str, rows: int, seconds: float, out: Any) -> None:
    """One plain-SQL writer: autocommit UPDATEs of random rows of ``table`` for ``seconds``;
    reports its commits/s and its server backend's CPU seconds per commit."""
    import psycopg

    rng = random.Random(table)
    done = 0
    with psycopg.connect(url, autocommit=True) as db:
        row = db.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        backend = int(row[0])
        cpu = _cpu_s(backend)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            db.execute(
                f"UPDATE {table} SET amount = amount + 1 WHERE id = %s",
                (f"o-{rng.randrange(rows)}",),
            )
            done += 1
        cpu = _cpu_s(backend) - cpu
    out.put((done / seconds, cpu / max(done, 1)))


def _holder(url: str, held: Any, release: Any) -> None:
    """Open a transaction that updates one row of ``orders_b`` and keep it open until told."""
    import psycopg

    with psycopg.connect(url) as db:
        db.execute("UPDATE orders_b SET amount = amount + 1 WHERE id = 'o-0'")
        held.set()
        release.wait(120)
        db.rollback()


def _throughput(url: str, size: Size) -> float:
    return writers_round(url, size.rows, size.seconds)[0]


def writers_round(url: str, rows: int, seconds: float) -> tuple[float, float]:
    """One writer per table at once for ``seconds``: total commits/s, and the mean of their
    server backends' CPU seconds per commit."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(url, table, rows, seconds, out)) for table in TABLES]
    for proc in procs:
        proc.start()
    got = [out.get(timeout=seconds + 60) for _ in procs]
    for proc in procs:
        proc.join(30)
    return sum(rate for rate, _ in got), statistics.mean(cpu for _, cpu in got)


def _latencies(url: str, size: Size, hold: bool) -> dict[str, Any]:
    """``updates`` timed UPDATEs of ``orders_a``, with ``orders_b`` held open or not."""
    import psycopg

    ctx = mp.get_context("spawn")
    held, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_holder, args=(url, held, release)) if hold else None
    if holder is not None:
        holder.start()
        if not held.wait(60):
            raise RuntimeError("the holder did not open its transaction")
    times: list[float] = []
    timeouts = 0
    try:
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
            for i in range(size.updates):
                start = time.perf_counter()
                try:
                    db.execute(
                        "UPDATE orders_a SET amount = amount + 1 WHERE id = %s",
                        (f"o-{i % size.rows}",),
                    )
                except psycopg.errors.QueryCanceled:
                    timeouts += 1
                    break  # it waits: one bounded wait is the answer
                times.append(time.perf_counter() - start)
    finally:
        release.set()
        if holder is not None:
            holder.join(30)
    ordered = sorted(times) or [float("nan")]
    return {
        "p50_ms": ordered[len(ordered) // 2] * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000,
        "timeouts": timeouts,
        "done": len(times),
    }


def _make(url: str, rows: int) -> None:
    import psycopg

    with psycopg.connect(url) as db:
        for table in TABLES:
            db.execute(f"CREATE TABLE {table} (id TEXT PRIMARY KEY, amount INTEGER NOT NULL)")
            db.execute(
                f"INSERT INTO {table} SELECT 'o-' || i, 0 FROM generate_series(0, %s) AS i",
                (rows - 1,),
            )


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    from invalidation_contracts.server.sql.source import SQLSource

    size = QUICK if quick else FULL
    with postgres_cluster() as cluster:
        plain, captured = cluster.database(), cluster.database()
        _make(plain, size.rows)
        _make(captured, size.rows)
        source = SQLSource(captured, {t: SQLTable(t, key="id", columns=["amount"]) for t in TABLES})
        source.open()
        source.close()
        rates: dict[str, list[float]] = {"uncaptured": [], "captured": []}
        for round_ in range(size.rounds):  # alternate which goes first
            order = [("uncaptured", plain), ("captured", captured)]
            for name, url in order[:: 1 if round_ % 2 == 0 else -1]:
                rates[name].append(_throughput(url, size))
        waits = {
            (db, hold): _latencies(url, size, hold)
            for db, url in (("uncaptured", plain), ("captured", captured))
            for hold in (False, True)
        }
    base, with_capture = (
        statistics.median(rates["uncaptured"]),
        statistics.median(rates["captured"]),
    )
    ratio = with_capture / base
    rows = [
        [name, f"{statistics.median(values):.0f}", " / ".join(f"{v:.0f}" for v in values)]
        for name, values in rates.items()
    ]
    wait_rows = [
        [
            db,
            "open transaction on orders_b" if hold else "nothing held",
            f"{w['p50_ms']:.2f}" if w["done"] else "—",
            f"{w['p99_ms']:.2f}" if w["done"] else "—",
            f"{w['done']} / {size.updates}",
            "yes (statement timeout)" if w["timeouts"] else "no",
        ]
        for (db, hold), w in waits.items()
    ]
    blocked = any(w["timeouts"] for (db, _), w in waits.items() if db == "captured")
    md = (
        f"Two plain-SQL writer processes (psycopg, autocommit single-row UPDATEs), one per table, "
        f"{size.seconds:g} s per round, {size.rounds} round(s) each, alternating; {size.rows:,} "
        f"rows per table; embedded PostgreSQL on the same machine; capture as of commit "
        f"`{_commit() or 'unknown'}`.\n\n"
        + markdown_table(["capture", "commits/s (median)", "rounds"], rows)
        + f"\n\n**Captured / uncaptured: {ratio:.2f}×** (target ≥ 0.8×).\n\n"
        f"A writer on `orders_a` ({size.updates} timed UPDATEs, `statement_timeout` "
        f"{STATEMENT_TIMEOUT_MS} ms) while another process holds a transaction that updated "
        "`orders_b`:\n\n"
        + markdown_table(
            ["capture", "other table", "p50 (ms)", "p99 (ms)", "completed", "waits"], wait_rows
        )
    )
    checks = [
        Check("captured / uncaptured throughput ≥ 0.8× (issue 21)", f"{ratio:.2f}×", ratio >= 0.8),
        Check(
            "no writer waits on the other table's open transaction (issue 21)",
            "waits" if blocked else "no wait",
            not blocked,
        ),
    ]
    data = {
        "rates": rates,
        "ratio": ratio,
        "waits": {f"{db}/{'held' if hold else 'free'}": w for (db, hold), w in waits.items()},
    }
    return StudyResult(NAME, TITLE, md, checks, [], data)
