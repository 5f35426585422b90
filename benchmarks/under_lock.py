"""Hand A/B (issue 41): rows read and seconds spent under the registry's lock by a reconciliation.

Three passes over one table of ``--rows`` rows, each with one row written around the capture:
a logical-decoding worker's start, a logical-decoding pass after its slot was lost, and a SQLite
worker's start. Run it with ``PYTHONPATH`` pointing at the ``src/`` under test (a copy of main's,
then this branch's) and compare the JSON it prints: ``locked_s`` is the time inside
``Registry.transaction`` (the writers' lock held), ``locked_rows`` the rows read in full inside it,
``total_s`` the pass's wall time (the survey beside the lock included).

``python -m benchmarks.under_lock --rows 100000``
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from invalidation_contracts.server import Domain, SQLTable
from invalidation_contracts.server.capture.source import surveyed
from invalidation_contracts.server.capture.survey import Recheck
from invalidation_contracts.server.registry import Registry
from invalidation_contracts.server.sql import source as source_module
from invalidation_contracts.server.worker.runtime import ingest, open_runtime


def items() -> Domain:
    return Domain("bulk", {"items": SQLTable("items")}, [], [])


class LockMeter:
    """Times ``Registry.transaction`` and counts the rows ``read_tables`` returns inside it."""

    def __init__(self) -> None:
        self.locked_s = 0.0
        self.locked_rows = 0
        self._inside = 0

    def install(self) -> None:
        real_tx = Registry.transaction
        real_read = source_module.read_tables
        meter = self

        @contextmanager
        def transaction(registry: Registry) -> Iterator[Any]:
            started = time.perf_counter()
            meter._inside += 1
            try:
                with real_tx(registry) as tx:
                    yield tx
            finally:
                meter._inside -= 1
                meter.locked_s += time.perf_counter() - started

        def read_tables(*args: Any) -> Any:
            out = real_read(*args)
            if meter._inside:
                meter.locked_rows += sum(len(rows) for rows in out[0].values())
            return out

        Registry.transaction = transaction  # type: ignore[method-assign]
        source_module.read_tables = read_tables

    def measure(self, work: Callable[[], None]) -> dict[str, float]:
        self.locked_s, self.locked_rows = 0.0, 0
        started = time.perf_counter()
        work()
        return {
            "total_s": round(time.perf_counter() - started, 2),
            "locked_s": round(self.locked_s, 2),
            "locked_rows": self.locked_rows,
        }


def survey_if_due(runtime: Any) -> None:
    """What the follower's leader does next: a due survey, then its recheck under the lock."""
    source = surveyed(runtime.sources[0])
    if source is None or not source.reconcile_due():
        return
    state = runtime.registry.state
    marks = {name: f"{state.epoch}/{t.version}" for name, t in state.tables.items()}
    found = source.survey(state.tables, marks)
    if found.candidates:
        ingest(runtime.registry, runtime.sources[0], recheck=Recheck(found.candidates))


def fill(connect: Callable[[], Any], rows: int, sqlite: bool = False) -> None:
    with connect() as db:
        db.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price INTEGER)")
        if sqlite:
            db.executemany(
                "INSERT INTO items VALUES (?, ?, ?)",
                ((i, f"item {i}", i % 997) for i in range(rows)),
            )
        else:
            db.execute(
                "INSERT INTO items SELECT i, 'item ' || i, i %% 997 FROM generate_series(0, %s) i",
                (rows - 1,),
            )


def logical(url: str, rows: int, meter: LockMeter) -> dict[str, Any]:
    from invalidation_contracts.server.sql.logical import LogicalSource

    fill(lambda: psycopg.connect(url, autocommit=True), rows)

    def source() -> LogicalSource:
        return LogicalSource(url, items().sql_tables, reconcile_interval_s=None)

    open_runtime(items(), store=url, database=source()).close()  # the registry's first load
    bypass = (
        "ALTER PUBLICATION ic_capture DROP TABLE items",
        "UPDATE items SET price = -1 WHERE id = 7",
        "ALTER PUBLICATION ic_capture ADD TABLE items",
    )
    with psycopg.connect(url, autocommit=True) as db:
        for statement in bypass:
            db.execute(statement)
    holder: list[Any] = []

    def start() -> None:
        holder.append(open_runtime(items(), store=url, database=source()))
        survey_if_due(holder[0])

    out: dict[str, Any] = {"start": meter.measure(start)}
    runtime = holder[0]
    assert runtime.registry.state.tables["items"].rows["7"]["price"] == -1
    try:
        slot = runtime.sources[0].slot
        with psycopg.connect(url, autocommit=True) as db:
            db.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            db.execute("UPDATE items SET price = -2 WHERE id = 8")  # no slot saw it

        def lost_slot_pass() -> None:
            ingest(runtime.registry, runtime.sources[0])
            survey_if_due(runtime)

        out["lost_slot"] = meter.measure(lost_slot_pass)
        assert runtime.registry.state.tables["items"].rows["8"]["price"] == -2
    finally:
        runtime.close()
    return out


def sqlite(rows: int, meter: LockMeter) -> dict[str, Any]:
    import sqlite3

    from invalidation_contracts.server.sql.source import SQLSource

    tmp = Path(tempfile.mkdtemp(prefix="ic-under-lock-"))
    data, store = tmp / "data.sqlite", str(tmp / "registry.sqlite")

    @contextmanager
    def connect() -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(data)
        try:
            yield db
            db.commit()
        finally:
            db.close()

    fill(connect, rows, sqlite=True)

    def source() -> SQLSource:
        return SQLSource(f"sqlite:///{data}", items().sql_tables, reconcile_interval_s=None)

    open_runtime(items(), store=store, database=source()).close()
    holder: list[Any] = []

    def start() -> None:
        holder.append(open_runtime(items(), store=store, database=source()))
        survey_if_due(holder[0])

    out = {"start": meter.measure(start)}
    holder[0].close()
    return out


def main() -> None:
    from tests.support.postgres import PostgresCluster

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    rows = parser.parse_args().rows
    meter = LockMeter()
    meter.install()
    found: dict[str, Any] = {"rows": rows, "sqlite": sqlite(rows, meter)}
    cluster = PostgresCluster.start()
    try:
        found["logical"] = logical(cluster.database(), rows, meter)
    finally:
        cluster.stop()
    print(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
