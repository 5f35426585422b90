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

import asyncio
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from invalidation_contracts.domains import get_domain
from invalidation_contracts.server import SQLTable

from . import loadgen
from .common import Check, StudyResult, _commit, markdown_table
from .production import DOMAIN, _quantile, _Writer, _writer
from .servers import serve_command
from .two_writers import TABLES, _make

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


def _cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _writer_proc(url: str, table: str, rows: int, seconds: float, out: Any) -> None:
    """One plain-SQL writer; reports commits/s and its server backend's CPU per commit."""
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


def _round(url: str, size: Size) -> tuple[float, float]:
    """Both writers at once: total commits/s, mean backend CPU seconds per commit."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_writer_proc, args=(url, table, size.rows, size.seconds, out))
        for table in TABLES
    ]
    for proc in procs:
        proc.start()
    got = [out.get(timeout=size.seconds + 60) for _ in procs]
    for proc in procs:
        proc.join(30)
    return sum(rate for rate, _ in got), statistics.mean(cpu for _, cpu in got)


def _propagation(database: str, capture: str, size: Size) -> dict[str, Any]:
    from invalidation_contracts.server.sql import create_tables

    create_tables(database, get_domain(DOMAIN))
    args = ("--domain", DOMAIN, "--database", database, "--db", database, "--capture", capture)
    with ExitStack() as stack:
        ports = [stack.enter_context(serve_command(*args)).port for _ in range(size.workers)]
        writer = _writer(database)
        try:
            samples = asyncio.run(_propagate(ports, writer, size.trials))
        finally:
            writer.close()
    slowest = [max(trial) for trial in samples]
    return {
        "trials": len(samples),
        "p50_ms": 1000 * _quantile(slowest, 0.5),
        "p99_ms": 1000 * _quantile(slowest, 0.99),
        "max_ms": 1000 * max(slowest),
    }


async def _propagate(ports: list[int], writer: _Writer, trials: int) -> list[list[float]]:
    """Per trial, each worker's seconds from the writer's COMMIT to its versions moving."""
    conns = [await asyncio.open_connection(loadgen.LOOPBACK, port) for port in ports]
    loop = asyncio.get_running_loop()
    samples = []
    try:
        for trial in range(trials):
            before = await _settled(*conns[0])

            def commit(code: str = f"LOGICAL{trial}") -> float:
                writer.commit(code)
                return time.perf_counter()

            committed = await loop.run_in_executor(None, commit)
            seen = await asyncio.gather(*(_until_moved(r, w, before) for r, w in conns))
            samples.append([t - committed for t in seen])
            await asyncio.sleep(0.05)
    finally:
        for _, w in conns:
            w.close()
    return samples


async def _settled(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str:
    """The version once the worker answers (a loaded machine may make it answer 503 a while)."""
    deadline = time.perf_counter() + 60
    while (version := await _version(reader, writer)) is None:
        if time.perf_counter() > deadline:
            raise TimeoutError("a worker never answered")
        await asyncio.sleep(0.05)
    return version


async def _until_moved(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, before: str
) -> float:
    deadline = time.perf_counter() + 30
    while time.perf_counter() < deadline:
        version = await _version(reader, writer)
        if version is not None and version != before:
            return time.perf_counter()
        await asyncio.sleep(0.001)
    raise TimeoutError("a worker never saw the change")


async def _version(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str | None:
    """``active_csm_codes``' version, or None when the worker answers without one (503)."""
    writer.write(b"GET /contract/versions HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    body = json.loads(await reader.readexactly(length))
    versions = body.get("table_versions") if isinstance(body, dict) else None
    return str(versions["active_csm_codes"]) if versions else None


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
                rate, cpu = _round(urls[name], size)
                rates[name].append(rate)
                cpus[name].append(cpu)
                print(f"[{NAME}] {name}: {rate:.0f} commits/s, {1e6 * cpu:.1f} µs", file=sys.stderr)
        propagation = {
            capture: _propagation(cluster.database(), capture, size)
            for capture in ("triggers", "logical")
        }
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
