"""Study — logical decoding against triggers (issue 40): what each change source costs a provider's
writers, and how fast a commit reaches four workers.

Setup: one embedded PostgreSQL at ``wal_level = logical`` (both sources run on it; the trigger
capture does not need it). Three databases made with plain SQL (``orders_a``, ``orders_b``,
``ROWS`` rows each): *uncaptured* (never opened by the library), *triggers* (opened once by
``SQLSource``: triggers installed) and *logical* (opened once by ``LogicalSource``: the tables
published, the slot created; no trigger). A round: two writer processes, one per table, each
``UPDATE ... SET amount = amount + 1 WHERE id = <random>`` in autocommit for ``seconds``; the
figure is their total commits per second, and each writer's server backend CPU (``/proc``,
user + system) per commit. No worker consumes during a round (as in ``two_writers``): the cost
measured is the writer's. Rounds rotate the order of the three databases; ratios are of medians.
Propagation: ``workers`` ``serve`` processes over acme billing with ``--capture triggers`` or
``--capture logical``; a plain-SQL ``UPDATE`` is committed and each worker's
``/contract/versions`` polled until it moves; the figure per trial is the slowest worker.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from invalidation_contracts.server import SQLTable

from .common import Check, StudyResult, _commit, markdown_table
from .production import propagate
from .two_writers import TABLES, _make, writers_round

NAME = "logical_capture"
TITLE = "Logical decoding against triggers: writer throughput, writer CPU, propagation"
SOURCES = ("uncaptured", "triggers", "logical")


@dataclass(frozen=True, slots=True)
class Size:
    rows: int
    seconds: float
    rounds: int
    trials: int
    workers: int = 4


FULL = Size(rows=10_000, seconds=3.0, rounds=6, trials=100)
QUICK = Size(rows=1_000, seconds=1.0, rounds=1, trials=10, workers=2)


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    from tests.support.postgres import PostgresCluster

    from invalidation_contracts.server.sql.logical import LogicalSource
    from invalidation_contracts.server.sql.source import SQLSource

    size = QUICK if quick else FULL
    cluster = PostgresCluster.start()
    try:
        urls = {name: cluster.database() for name in SOURCES}
        declared = {t: SQLTable(t, key="id", columns=["amount"]) for t in TABLES}
        for url in urls.values():
            _make(url, size.rows)
        for source in (
            SQLSource(urls["triggers"], declared),
            LogicalSource(urls["logical"], declared),
        ):
            source.open()
            source.close()
        rates: dict[str, list[float]] = {name: [] for name in SOURCES}
        cpus: dict[str, list[float]] = {name: [] for name in SOURCES}
        for round_ in range(size.rounds):  # rotate which goes first
            for name in SOURCES[round_ % 3 :] + SOURCES[: round_ % 3]:
                rate, cpu = writers_round(urls[name], size.rows, size.seconds)
                rates[name].append(rate)
                cpus[name].append(cpu)
                print(f"[{NAME}] {name}: {rate:.0f} commits/s, {1e6 * cpu:.1f} µs", file=sys.stderr)
        propagation = {}
        for capture in ("triggers", "logical"):
            database = cluster.database()
            propagation[capture] = propagate(
                database, database, size.workers, size.trials, "--capture", capture
            )
    finally:
        cluster.stop()
    return _report(rates, cpus, propagation, size)


def _report(
    rates: dict[str, list[float]],
    cpus: dict[str, list[float]],
    propagation: dict[str, dict[str, Any]],
    size: Size,
) -> StudyResult:
    rate = {name: statistics.median(values) for name, values in rates.items()}
    cpu_us = {name: 1e6 * statistics.median(values) for name, values in cpus.items()}
    ratio = {name: rate[name] / rate["uncaptured"] for name in ("triggers", "logical")}
    extra = {name: cpu_us[name] - cpu_us["uncaptured"] for name in ("triggers", "logical")}
    rows = [
        [
            name,
            f"{rate[name]:.0f}",
            " / ".join(f"{v:.0f}" for v in rates[name]),
            f"{rate[name] / rate['uncaptured']:.2f}×",
            f"{cpu_us[name]:.1f}",
            "—" if name == "uncaptured" else f"{cpu_us[name] - cpu_us['uncaptured']:+.1f}",
        ]
        for name in SOURCES
    ]
    prop_rows = [
        [
            capture,
            str(p["trials"]),
            f"{p['p50_ms']:.1f}",
            f"{p['p99_ms']:.1f}",
            f"{p['max_ms']:.1f}",
        ]
        for capture, p in propagation.items()
    ]
    md = (
        f"Two plain-SQL writer processes (psycopg, autocommit single-row UPDATEs), one per table, "
        f"{size.seconds:g} s per round, {size.rounds} round(s) per database, order rotated; "
        f"{size.rows:,} rows per table; embedded PostgreSQL 18 at `wal_level = logical` on the "
        f"same machine; commit `{_commit() or 'unknown'}`. Backend CPU: the writer's server "
        "process, user + system, per commit.\n\n"
        + markdown_table(
            [
                "capture",
                "commits/s (median)",
                "rounds",
                "/ uncaptured",
                "backend CPU µs/commit",
                "capture's CPU µs/row",
            ],
            rows,
        )
        + f"\n\nPropagation, COMMIT → {size.workers} workers (`serve --capture …`, one process "
        "each; the slowest worker per trial; idle otherwise):\n\n"
        + markdown_table(["capture", "trials", "p50 (ms)", "p99 (ms)", "max (ms)"], prop_rows)
    )
    checks = [
        Check(
            "logical decoding: captured / uncaptured throughput ≥ 0.95× (issue 40)",
            f"{ratio['logical']:.2f}×",
            ratio["logical"] >= 0.95,
        ),
        Check(
            "logical decoding: propagation p99 ≤ 100 ms idle (issue 40)",
            f"{propagation['logical']['p99_ms']:.1f} ms",
            propagation["logical"]["p99_ms"] <= 100,
        ),
    ]
    data = {
        "rates": rates,
        "cpu_s_per_commit": cpus,
        "ratio": ratio,
        "capture_cpu_us_per_row": extra,
        "propagation": propagation,
    }
    return StudyResult(NAME, TITLE, md, checks, [], data)
