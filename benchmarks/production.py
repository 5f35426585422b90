"""Study — the provider in production: propagation, workers, SQL-backed tables, capture cost.

1. Propagation: Acme billing with its tables in PostgreSQL (and in SQLite), four ``serve``
   processes on one registry. Another connection commits an ``UPDATE`` of a declared table; each
   worker is polled on its own keep-alive connection until it answers with the table's new
   version. Reported: COMMIT → that answer, for the slowest of the four (p50, p99).
2. Throughput of the failures mix, ``serve --workers 1`` against ``serve --workers 4`` on one
   PostgreSQL registry (``benchmarks/loadgen.py``, 8 connections), rounds alternating.
3. Policy evaluation over SQL-backed tables against in-memory tables: ``Provider.handle`` on the
   failures mix, in-process (SQL rows are loaded into the same immutable snapshots, so a read does
   no I/O).
4. The capture's write cost: single-statement ``UPDATE`` transactions on a declared table (its
   triggers write the capture record) against the same ``UPDATE`` on an identical table without
   triggers, in PostgreSQL and SQLite, rounds alternating.
"""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from invalidation_contracts.domains import get_catalog, get_domain
from invalidation_contracts.server import SQLTable
from invalidation_contracts.server.provider import Provider
from invalidation_contracts.server.sql import SQLSource, create_tables, sql_domain
from invalidation_contracts.server.worker.runtime import open_runtime

from . import loadgen
from .common import Check, StudyResult, markdown_table, median
from .provider_load import DOMAIN, request_mixes
from .servers import serve_command

NAME = "production"
TITLE = "Provider in production: propagation, workers, SQL tables, capture cost"
PROPAGATION_P99_MS = 100.0
WORKERS_TARGET = 3.0
ROTATE = "UPDATE active_csm_codes SET code = ? WHERE key = 'plan_partner_growth'"


@dataclass(frozen=True, slots=True)
class Size:
    propagation_trials: int
    load_requests: int
    load_rounds: int
    load_warmup: int
    policy_calls: int
    policy_rounds: int
    updates: int
    update_rounds: int
    time_limit_s: float = 30.0
    workers: int = 4
    sqlite_propagation: bool = True


FULL = Size(200, 3000, 3, 600, 2000, 5, 400, 5)
QUICK = Size(3, 100, 1, 20, 50, 1, 20, 1, 10.0, workers=2, sqlite_propagation=False)


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    from tests.support.postgres import PostgresCluster

    size = QUICK if quick else FULL
    cluster = PostgresCluster.start()
    data: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="bench-production-") as tmp:
            root = Path(tmp)
            pg = cluster.database()
            data["propagation"] = {"postgres": propagation(pg, pg, size)}
            if size.sqlite_propagation:
                sqlite = f"sqlite:///{root / 'acme.db'}"
                data["propagation"]["sqlite"] = propagation(sqlite, str(root / "reg.db"), size)
            data["workers"] = workers(cluster.database(), size)
            data["policy"] = policy(f"sqlite:///{root / 'policy.db'}", size)
            data["capture"] = {
                "postgres": capture_cost(cluster.database(), size),
                "sqlite": capture_cost(f"sqlite:///{root / 'capture.db'}", size),
            }
    finally:
        cluster.stop()
    return _report(data, size)


# -- 1. propagation --------------------------------------------------------------------------


PROBES = ("poll", "watch")
"""How "a worker has the change" is seen: ``poll`` asks ``GET /contract/versions`` on a keep-alive
connection every millisecond (the workers' own request loop is then part of the load: ~1,000
requests/s per worker); ``watch`` holds one ``GET /contract/watch`` stream per worker and takes
the arrival of its ``versions`` event for the new position (what a watching agent sees; the
probe itself loads nothing)."""


def propagation(database: str, store: str, size: Size, *, probe: str = "poll") -> dict[str, Any]:
    return propagate(database, store, size.workers, size.propagation_trials, probe=probe)


def propagate(
    database: str, store: str, workers: int, trials: int, *serve_args: str, probe: str = "poll"
) -> dict[str, Any]:
    """COMMIT → ``workers`` ``serve`` processes (``serve_args`` added to each, e.g. a
    ``--capture``), ``trials`` times; the slowest worker per trial, as quantiles. ``probe``:
    how a worker's move is seen (``PROBES``)."""
    if probe not in PROBES:
        raise ValueError(f"probe must be one of {PROBES}, not {probe!r}")
    create_tables(database, get_domain(DOMAIN))
    args = ("--domain", DOMAIN, "--database", database, "--db", store, *serve_args)
    with ExitStack() as stack:
        ports = [stack.enter_context(serve_command(*args)).port for _ in range(workers)]
        writer = _writer(database)
        try:
            measure = _propagate if probe == "poll" else _watched
            samples = asyncio.run(measure(ports, writer, trials))
        finally:
            writer.close()
    slowest = [max(trial) for trial in samples]
    every = [s for trial in samples for s in trial]
    return {
        "trials": len(samples),
        "p50_ms": 1000 * _quantile(slowest, 0.5),
        "p99_ms": 1000 * _quantile(slowest, 0.99),
        "max_ms": 1000 * max(slowest),
        "per_worker_p50_ms": 1000 * _quantile(every, 0.5),
        "probe": probe,
    }


class _Writer:
    """Commits the rotation UPDATE as another program would (no library code)."""

    def __init__(self, commit: Callable[[str], None], close: Callable[[], None]) -> None:
        self.commit = commit
        self.close = close


def _writer(database: str) -> _Writer:
    if database.startswith("sqlite:///"):
        db = sqlite3.connect(
            database[len("sqlite:///") :], isolation_level=None, timeout=30, check_same_thread=False
        )

        def commit_sqlite(code: str) -> None:
            db.execute(ROTATE, (code,))

        return _Writer(commit_sqlite, db.close)
    import psycopg

    conn = psycopg.connect(database, autocommit=True)

    def commit_pg(code: str) -> None:
        conn.execute(ROTATE.replace("?", "%s"), (code,))

    return _Writer(commit_pg, conn.close)


async def _propagate(ports: Sequence[int], writer: _Writer, trials: int) -> list[list[float]]:
    """Per trial, each worker's seconds from the writer's COMMIT to its versions moving."""
    conns = [await asyncio.open_connection(loadgen.LOOPBACK, port) for port in ports]
    loop = asyncio.get_running_loop()
    samples = []
    try:
        for trial in range(trials):
            before = await _settled(*conns[0])

            def commit(code: str = f"ROTATED{trial}") -> float:
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


async def _watched(ports: Sequence[int], writer: _Writer, trials: int) -> list[list[float]]:
    """Per trial, each worker's seconds from the writer's COMMIT to its watch stream's event for
    a later position (one stream per worker, opened before the first trial)."""
    streams = [await _Watch.open(port) for port in ports]
    loop = asyncio.get_running_loop()
    samples = []
    try:
        for trial in range(trials):
            before = [stream.seq for stream in streams]

            def commit(code: str = f"WATCHED{trial}") -> float:
                writer.commit(code)
                return time.perf_counter()

            committed = await loop.run_in_executor(None, commit)
            seen = await asyncio.gather(*(s.after(b) for s, b in zip(streams, before, strict=True)))
            samples.append([t - committed for t in seen])
            await asyncio.sleep(0.05)
    finally:
        for stream in streams:
            stream.close()
    return samples


class _Watch:
    """One worker's ``GET /contract/watch`` stream: each position told, and when. A stream the
    worker ends (it cannot vouch for its state: an ``error`` event, or a 503 at the start) is
    opened again, as a watching agent would, and tells the current position at once."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.told: list[tuple[int, float]] = []  # (position, when its event arrived)
        self.moved = asyncio.Event()
        self.writer: asyncio.StreamWriter | None = None
        self.task = asyncio.ensure_future(self._follow())

    @classmethod
    async def open(cls, port: int) -> _Watch:
        """A stream that told its first position (bounded: 60 s)."""
        stream = cls(port)
        await stream.after(-1, bound_s=60)
        return stream

    async def _follow(self) -> None:
        request = b"GET /contract/watch?timeout=3600 HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"
        while True:
            try:
                reader, self.writer = await asyncio.open_connection(loadgen.LOOPBACK, self.port)
                self.writer.write(request)
                await self.writer.drain()
                head = await reader.readuntil(b"\r\n\r\n")
                # SSE over chunked encoding: chunk-size lines are skipped; ``id:`` is the seq
                while head.startswith(b"HTTP/1.1 200") and (line := await reader.readline()):
                    if line.startswith(b"id:"):
                        self.told.append((int(line[3:]), time.perf_counter()))
                        self.moved.set()
                    elif line.startswith(b"event: error"):
                        break
            except (OSError, asyncio.IncompleteReadError):
                pass
            if self.writer is not None:
                self.writer.close()
            await asyncio.sleep(0.05)

    @property
    def seq(self) -> int:
        return self.told[-1][0] if self.told else -1

    async def after(self, seq: int, bound_s: float = 30.0) -> float:
        """When this stream first told a position after ``seq``."""
        deadline = time.perf_counter() + bound_s
        while True:
            self.moved.clear()
            later = next((at for told, at in self.told if told > seq), None)
            if later is not None:
                return later
            if self.task.done() or time.perf_counter() > deadline:
                raise TimeoutError("a worker's watch stream never told the change")
            try:
                await asyncio.wait_for(self.moved.wait(), 1.0)
            except TimeoutError:
                pass

    def close(self) -> None:
        self.task.cancel()
        if self.writer is not None:
            self.writer.close()


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
    import json

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


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- 2. workers ------------------------------------------------------------------------------


def workers(store: str, size: Size) -> dict[str, Any]:
    path = get_catalog(DOMAIN).route.path
    bodies = request_mixes()["failures"]
    counts = (1, size.workers)
    trials: dict[int, list[loadgen.Trial]] = {n: [] for n in counts}
    with ExitStack() as stack:
        ports = {
            n: stack.enter_context(
                serve_command("--domain", DOMAIN, "--db", store, "--workers", str(n))
            ).port
            for n in counts
        }
        for n in counts:
            loadgen.run_trial(ports[n], path, bodies, size.load_warmup, 8, size.time_limit_s)
        for r in range(size.load_rounds):
            for n in counts if r % 2 == 0 else counts[::-1]:
                trial = loadgen.run_trial(
                    ports[n], path, bodies, size.load_requests, 8, size.time_limit_s
                )
                trials[n].append(trial)
    ratio = median(b.rps / a.rps for a, b in zip(trials[1], trials[counts[1]], strict=True))
    return {
        str(n): {
            "rps": median(t.rps for t in ts),
            "p50_ms": 1000 * median(t.quantile(0.5) for t in ts),
            "p99_ms": 1000 * median(t.quantile(0.99) for t in ts),
            "errors": sum(t.errors for t in ts),
        }
        for n, ts in trials.items()
    } | {"ratio": ratio, "workers": counts[1]}


# -- 3. policy evaluation ----------------------------------------------------------------------


def policy(database: str, size: Size) -> dict[str, Any]:
    catalog = get_catalog(DOMAIN)
    drafts = [dict(f.fields) for f in catalog.task_families.values()]
    memory = Provider(catalog.domain, level=6)
    create_tables(database, catalog.domain)
    runtime = open_runtime(sql_domain(catalog.domain), database=database)
    try:
        sql = Provider(sql_domain(catalog.domain), runtime.registry, level=6)
        route = catalog.route
        times: dict[str, list[float]] = {"memory": [], "sql": []}
        for r in range(size.policy_rounds):
            for name, provider in (("memory", memory), ("sql", sql))[:: 1 if r % 2 == 0 else -1]:
                start = time.perf_counter()
                for i in range(size.policy_calls):
                    provider.handle(route, drafts[i % len(drafts)])
                times[name].append((time.perf_counter() - start) / size.policy_calls)
    finally:
        runtime.close()
    return {
        "memory_us": 1e6 * median(times["memory"]),
        "sql_us": 1e6 * median(times["sql"]),
        "ratio": median(s / m for m, s in zip(times["memory"], times["sql"], strict=True)),
    }


# -- 4. capture cost ---------------------------------------------------------------------------


def capture_cost(database: str, size: Size) -> dict[str, Any]:
    statements = (
        "CREATE TABLE captured (id TEXT PRIMARY KEY, v INTEGER NOT NULL)",
        "CREATE TABLE plain (id TEXT PRIMARY KEY, v INTEGER NOT NULL)",
        *(f"INSERT INTO {t} VALUES ('k{i}', 0)" for t in ("captured", "plain") for i in range(10)),
    )
    execute, close = _connection(database)
    try:
        for statement in statements:
            execute(statement)
        source = SQLSource(database, {"captured": SQLTable("captured")})
        try:
            source.open()  # installs the triggers on ``captured`` only
        finally:
            source.close()
        times: dict[str, list[float]] = {"captured": [], "plain": []}
        for r in range(size.update_rounds):
            for table in ("captured", "plain") if r % 2 == 0 else ("plain", "captured"):
                start = time.perf_counter()
                for i in range(size.updates):
                    execute(f"UPDATE {table} SET v = v + 1 WHERE id = 'k{i % 10}'")
                times[table].append((time.perf_counter() - start) / size.updates)
    finally:
        close()
    pairs = zip(times["plain"], times["captured"], strict=True)
    return {
        "plain_us": 1e6 * median(times["plain"]),
        "captured_us": 1e6 * median(times["captured"]),
        "ratio": median(c / p for p, c in pairs),
    }


def _connection(database: str) -> tuple[Callable[[str], None], Callable[[], None]]:
    if database.startswith("sqlite:///"):
        db = sqlite3.connect(database[len("sqlite:///") :], isolation_level=None)
        db.execute("PRAGMA journal_mode = WAL")

        def run_sqlite(statement: str) -> None:
            db.execute(statement)

        return run_sqlite, db.close
    import psycopg

    conn = psycopg.connect(database, autocommit=True)

    def run_pg(statement: str) -> None:
        conn.execute(statement.encode())

    return run_pg, conn.close


# -- report ------------------------------------------------------------------------------------


def _report(data: dict[str, Any], size: Size) -> StudyResult:
    prop = data["propagation"]
    rows = [
        [
            f"Propagation, {size.workers} workers, {db}",
            f"p50 {p['p50_ms']:.1f} ms, p99 {p['p99_ms']:.1f} ms (max {p['max_ms']:.1f})",
            f"{p['trials']} UPDATEs; each worker's own p50 {p['per_worker_p50_ms']:.1f} ms",
        ]
        for db, p in prop.items()
    ]
    w = data["workers"]
    n = str(w["workers"])
    rows.append(
        [
            f"Failures mix, `serve --workers {n}` / `--workers 1`, PostgreSQL registry",
            f"**{w['ratio']:.2f}×** requests/s",
            f"{w['1']['rps']:.0f} → {w[n]['rps']:.0f} req/s; p99 {w['1']['p99_ms']:.1f} → "
            f"{w[n]['p99_ms']:.1f} ms; errors {w['1']['errors']}/{w[n]['errors']}",
        ]
    )
    p = data["policy"]
    rows.append(
        [
            "Policy evaluation, SQL-backed / in-memory tables",
            f"**{p['ratio']:.3f}×**",
            f"{p['sql_us']:.1f} µs against {p['memory_us']:.1f} µs per request",
        ]
    )
    for db, c in data["capture"].items():
        rows.append(
            [
                f"UPDATE with capture / without, {db}",
                f"**{c['ratio']:.2f}×**",
                f"{c['captured_us']:.0f} µs against {c['plain_us']:.0f} µs per transaction",
            ]
        )
    checks = [
        Check(
            f"Propagation p99 ≤ {PROPAGATION_P99_MS:.0f} ms ({size.workers} workers, PostgreSQL)",
            f"{prop['postgres']['p99_ms']:.1f} ms",
            prop["postgres"]["p99_ms"] <= PROPAGATION_P99_MS,
        ),
        Check(
            f"{n} workers ≥ {WORKERS_TARGET:.0f}× 1 worker (target set for 4 cores; see the text)",
            f"{w['ratio']:.2f}×",
            w["ratio"] >= WORKERS_TARGET,
        ),
    ]
    md = "\n\n".join(
        [
            (
                f"Acme billing. Propagation: {size.propagation_trials} committed `UPDATE`s of "
                f"`active_csm_codes` by a plain driver connection; {size.workers} `serve` "
                "processes (tables "
                "read from the database, one registry) polled on their own keep-alive connections "
                "every millisecond; the figure is COMMIT → the first answer carrying the new "
                "version, for the slowest of the workers. On PostgreSQL the capture leader polls "
                "the capture's head every 20 ms (writers send no NOTIFY) and its registry commit "
                "wakes the others by LISTEN/NOTIFY; SQLite workers wake on inotify events of the "
                "database's files (one of them leads the capture). Workers: the "
                "failures mix through "
                f"`benchmarks/loadgen.py` (8 keep-alive connections, {size.load_requests} requests "
                f"per trial, {size.load_rounds} rounds alternating) against `serve --workers 1` "
                f"and `--workers {size.workers}` on one PostgreSQL registry. **This machine has 2 "
                "cores** (see "
                "`nproc` above), shared with the load generator, so four workers cannot run four "
                "at a time: the ratio shows what 2 cores give; the 3× target is for 4 cores. "
                f"Policy evaluation: `Provider.handle` over the failures mix, {size.policy_calls} "
                f"calls × {size.policy_rounds} rounds each. Capture: {size.updates} single-UPDATE "
                f"transactions per round, {size.update_rounds} rounds alternating."
            ),
            markdown_table(["Measure", "Result", "Detail"], rows),
        ]
    )
    return StudyResult(NAME, TITLE, md, checks, [], data)
