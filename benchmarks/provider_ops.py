"""Study — the provider under operations (issue 41): a large reconciliation while serving, spurious
503s on an idle healthy database, propagation with a long transaction elsewhere, and the captured
rate a running worker keeps up with.

1. Reconciliation: ``serve --workers 2`` over Acme billing with ``token_funding_map`` filled to
   ``rows`` rows (``generate_series``), ``--reconcile-interval 1``. One row is written with the
   capture trigger disabled; a client asks every worker (``GET /contract/versions`` on fresh
   connections, every 20 ms) until the bypass is reconciled and for 2 s after. Reported: the
   first start (the initialising load), bypass → reconciled on every worker (a survey under way,
   then the one that finds it), requests, 503s; then a second row is bypassed and another
   ``serve --workers 1`` starts over the same database and registry while the client keeps
   asking the first two: its start (ready, the bypass reconciled by its start's survey) and the
   first server's 503s meanwhile.
2. Idle: ``serve --workers 4``, nothing written, the same client for ``idle_s``: 503s. A session
   in another database of the same server is idle in a transaction that took a transaction id
   (it holds the cluster's xmin) from before this case until case 3's last trial.
3. Propagation: four ``serve`` processes (``production.propagation``: COMMIT → the slowest of the
   four has the new version, p50/p99) with that session held (its age recorded); first, before
   it is opened, the same with nothing held (the run's baseline). Two probes, each on its own four
   workers: the headline ``watch`` (one ``GET /contract/watch`` stream per worker; the time its
   event for the new position arrives: what a watching agent sees, and the probe loads nothing)
   and ``poll`` (``GET /contract/versions`` on each worker every millisecond, §10's probe: ~4,000
   requests/s on the workers' own request loops, so it measures propagation under that load).
4. Sustained capture: ``serve --workers 1``; two writer threads commit single-row UPDATEs (one
   table each, every commit a change) as fast as they can for ``write_s``; then a marker commit,
   timed until the worker serves it (the writers' last commit served: their lag), 503s meanwhile.
   Then the worker's capacity: while it is stopped (SIGSTOP), a procedure commits ``burst``
   single-row transactions and a marker after them; capacity = transactions / (SIGCONT → marker
   served), against the writers' rate.

``python -m benchmarks.provider_ops --rows 1000000 [--logs DIR]`` runs case 1 alone at that size
and prints its figures as JSON, each 503's problem detail included (``--logs``: the servers'
stderr as JSON lines, kept in DIR).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from invalidation_contracts.domains import get_domain
from invalidation_contracts.server.sql import create_tables

from . import production
from .common import Check, StudyResult, markdown_table, postgres_cluster
from .servers import serve_command

NAME = "provider_ops"
TITLE = "Provider under operations: large reconciliation, idle 503s, propagation, capture rate"
DOMAIN = "acme_billing"
TABLE = "token_funding_map"


@dataclass(frozen=True, slots=True)
class Size:
    rows: int
    idle_s: float
    trials: int
    write_s: float
    burst: int  # single-row transactions committed at once for the worker to drain (case 4)


# The sizes: 1M rows, 10 minutes idle (the session elsewhere then >= 10 minutes old when
# propagation is measured); about 20-25 minutes on a quiet 2-core machine.
FULL = Size(rows=1_000_000, idle_s=600.0, trials=60, write_s=20.0, burst=20_000)
QUICK = Size(rows=5_000, idle_s=5.0, trials=5, write_s=2.0, burst=500)


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    size = QUICK if quick else FULL
    data: dict[str, Any] = {}
    with postgres_cluster() as cluster:
        data["reconcile"] = reconcile(cluster.database(), size)
        data["propagation_alone"] = propagation(cluster.database(), None, size)
        elsewhere = cluster.database()
        # Opened before the idle case and held through the propagation trials: the idle run
        # shows no spurious 503 with the cluster's xmin held, and propagation is measured with
        # a session as old as the idle case (10 minutes at FULL).
        with HeldTransaction.open(elsewhere) as held:
            data["idle"] = idle(cluster.database(), size)
            data["idle"]["held_s"] = held.age_s()
            age = held.age_s()
            data["propagation"] = propagation(cluster.database(), elsewhere, size)
            data["held"] = {"age_at_propagation_s": age, "age_after_s": held.age_s()}
        data["capture"] = capture(cluster.database(), size)
    return _report(data, size)


@dataclass
class HeldTransaction:
    """A session idle in a transaction that took an id (it holds the cluster's xmin), in another
    database of the same server; its age as PostgreSQL counts it (``xact_start``)."""

    session: Any
    database: str
    pid: int

    @classmethod
    @contextmanager
    def open(cls, database: str) -> Iterator[HeldTransaction]:
        import psycopg

        with psycopg.connect(database) as session:
            row = session.execute("SELECT pg_current_xact_id(), pg_backend_pid()").fetchone()
            assert row is not None
            try:
                yield cls(session, database, int(row[1]))
            finally:
                session.rollback()

    def age_s(self) -> float | None:
        """Seconds since its transaction began; None if it is no longer idle in a transaction
        holding an id."""
        import psycopg

        with psycopg.connect(self.database, autocommit=True) as db:
            row = db.execute(
                "SELECT extract(epoch FROM clock_timestamp() - xact_start)::float"
                " FROM pg_stat_activity WHERE pid = %s AND backend_xid IS NOT NULL"
                " AND state = 'idle in transaction'",
                (self.pid,),
            ).fetchone()
        return None if row is None else float(row[0])


def _args(database: str, *more: str) -> tuple[str, ...]:
    return ("--domain", DOMAIN, "--database", database, "--db", database, *more)


def _seq(http: httpx.Client, url: str) -> int:
    return int(http.get(url + "/contract/versions").json()["contract_seq"])


def _ready(http: httpx.Client, url: str, seq: int, workers: int, bound_s: float = 1800.0) -> None:
    """Until ``workers`` distinct workers say ready at ``seq`` or later (bounded)."""
    seen: set[int] = set()
    deadline = time.monotonic() + bound_s
    while len(seen) < workers:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(seen)} of {workers} workers ready at {seq}")
        try:
            body = http.get(url + "/contract/ready").json()
        except httpx.TransportError:
            continue
        if body.get("ready") and body.get("contract_seq", -1) >= seq:
            seen.add(body["pid"])
        time.sleep(0.02)


def _unavailable(probe: Any, since: float) -> list[tuple[float, str | None]]:
    """Each 503 the probe saw: seconds after ``since`` it was sent, and why (its detail)."""
    return [(round(s.sent - since, 3), s.detail) for s in probe.unavailable()]


def reconcile(database: str, size: Size, logs: Path | None = None) -> dict[str, Any]:
    """Case 1; ``logs``: a folder that keeps each server's stderr (``first.log``,
    ``other.log``)."""
    import psycopg
    from tests.service.probes import Probe

    create_tables(database, get_domain(DOMAIN))
    with psycopg.connect(database) as db:
        db.execute(
            f"INSERT INTO {TABLE} (key, funding, network, issuer, expires)"
            " SELECT 'k' || i, 'credit', 'visa', 'Issuer ' || (i % 97), '2030-01'"
            f" FROM generate_series(1, {size.rows}) AS i"
        )
    limits = httpx.Limits(max_keepalive_connections=0)
    logged = ("--log-format", "json") if logs is not None else ()
    args = _args(database, "--workers", "2", "--reconcile-interval", "1", *logged)
    ready_s = 90.0 + size.rows / 1000.0  # a registry's first load grows with the table

    def bypass(key: str) -> None:
        with psycopg.connect(database) as db:
            db.execute(f"ALTER TABLE {TABLE} DISABLE TRIGGER ic_capture")
            db.execute(f"UPDATE {TABLE} SET issuer = 'Bypassed' WHERE key = %s", (key,))
            db.execute(f"ALTER TABLE {TABLE} ENABLE ALWAYS TRIGGER ic_capture")

    with ExitStack() as stack, httpx.Client(limits=limits, timeout=30) as http:
        started = time.monotonic()
        first_log = logs / "first.log" if logs is not None else None
        server = stack.enter_context(serve_command(*args, ready_s=ready_s, log_to=first_log))
        url = f"http://127.0.0.1:{server.port}"
        _ready(http, url, 0, 2)
        start_s = time.monotonic() - started
        before = _seq(http, url)
        with Probe(url) as probe:
            bypass("k7")
            bypassed = time.monotonic()
            _ready(http, url, before + 1, 2)
            repaired_s = time.monotonic() - bypassed
            time.sleep(2.0)
        rows = http.get(url + "/contract/changes", params={"since": before}).json()["rows"]
        # A worker started over the large table while the first two serve: a bypass made
        # while it was away is found by its start's survey, beside the serving workers.
        before_start = _seq(http, url)
        with Probe(url) as beside:
            bypass("k11")
            restarted, restarted_wall = time.monotonic(), time.time()
            more = _args(database, "--workers", "1", "--reconcile-interval", "3600", *logged)
            other_log = logs / "other.log" if logs is not None else None
            other = stack.enter_context(serve_command(*more, ready_s=ready_s, log_to=other_log))
            other_url = f"http://127.0.0.1:{other.port}"
            _ready(http, other_url, before_start + 1, 1)
            restart_s = time.monotonic() - restarted
            time.sleep(2.0)
    return {
        "rows": size.rows,
        "start_s": start_s,
        "bypass_to_reconciled_s": repaired_s,
        "requests": len(probe.seen),
        "503": sum(1 for s in probe.seen if s.status == 503),
        "changes": [(r["table"], r["key"], r["op"]) for r in rows],
        "restart_s": restart_s,
        "restart_requests": len(beside.seen),
        "restart_503": sum(1 for s in beside.seen if s.status == 503),
        "503_details": _unavailable(probe, bypassed),
        "restart_503_details": _unavailable(beside, restarted),
        "restart_started_unix": restarted_wall,
    }


def idle(database: str, size: Size) -> dict[str, Any]:
    from tests.service.probes import Probe

    create_tables(database, get_domain(DOMAIN))
    limits = httpx.Limits(max_keepalive_connections=0)
    with ExitStack() as stack, httpx.Client(limits=limits, timeout=30) as http:
        server = stack.enter_context(serve_command(*_args(database, "--workers", "4")))
        url = f"http://127.0.0.1:{server.port}"
        _ready(http, url, 0, 4)
        with Probe(url) as probe:
            time.sleep(size.idle_s)
    return {
        "seconds": size.idle_s,
        "requests": len(probe.seen),
        "503": sum(1 for s in probe.seen if s.status == 503),
    }


def propagation(database: str, elsewhere: str | None, size: Size) -> dict[str, Any]:
    """``production.propagation`` with the ``watch`` probe (the headline figures) and then the
    ``poll`` probe (under ``"poll"``); with ``elsewhere``, while a session there is idle in a
    transaction that took an id (without: the same run's baseline)."""
    import psycopg

    held = psycopg.connect(elsewhere or database)
    try:
        if elsewhere is not None:
            held.execute("SELECT pg_current_xact_id()")  # idle in transaction, an xid taken
        sizing = production.Size(size.trials, 0, 0, 0, 0, 0, 0, 0, workers=4)
        found = production.propagation(database, database, sizing, probe="watch")
        found["poll"] = production.propagation(database, database, sizing, probe="poll")
        with psycopg.connect(database, autocommit=True) as db:
            row = db.execute(
                "SELECT state FROM pg_stat_activity WHERE backend_xid IS NOT NULL"
                " AND state = 'idle in transaction'"
            ).fetchone()
        found["idle_in_transaction_elsewhere"] = row is not None
        return found
    finally:
        held.close()


MARKER = ("funding_type_policy", "required_funding", "plan_enterprise_annual")
BURST = """
CREATE OR REPLACE PROCEDURE ic_bench_burst(n integer) LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1..n LOOP
        UPDATE token_funding_map SET issuer = 'b' || i WHERE key = 'acme_pm_visa_debit';
        COMMIT;
    END LOOP;
END $$"""


def _version(http: httpx.Client, url: str, table: str) -> str | None:
    answer = http.get(url + "/contract/versions")
    if answer.status_code != 200:
        return None
    return (answer.json().get("table_versions") or {}).get(table)


def _signal(pid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to ``pid`` and every process under it (a ``serve`` and its workers)."""
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        _signal(int(child), sig)
    os.kill(pid, sig)


def _marked(
    database: str, http: httpx.Client, url: str, mark: str, bound_s: float = 600.0
) -> float:
    """Commit one change to the marker table and wait until the worker serves it; the seconds
    from that commit. Captured transactions are consumed in commit order, so every transaction
    committed before the marker is consumed by then."""
    import psycopg

    table, column, key = MARKER
    before = _version(http, url, table)
    with psycopg.connect(database, autocommit=True) as db:
        db.execute(f"UPDATE {table} SET {column} = %s WHERE key = %s", (mark, key))
    committed = time.monotonic()
    while True:
        now = _version(http, url, table)
        if now is not None and now != before:
            return time.monotonic() - committed
        if time.monotonic() - committed > bound_s:
            raise TimeoutError(f"the marker {mark!r} was not served within {bound_s:.0f} s")
        time.sleep(0.01)


def capture(database: str, size: Size) -> dict[str, Any]:
    """Case 4: two writers against one running worker, then a burst the worker drains.

    The writers' rate is what two client threads commit; the worker's capacity is what it
    consumes per second of consuming: ``size.burst`` single-row transactions (a procedure) and a
    marker committed while the worker is stopped (SIGSTOP: the same process, not restarted), then
    from SIGCONT until it serves the marker. It keeps up when its capacity is at least the
    writers' rate and it serves their last commit within the lag bound with no 503 meanwhile."""
    import psycopg
    from tests.service.probes import Probe

    from invalidation_contracts.server.worker.timing import DEFAULT_MAX_LAG_S

    create_tables(database, get_domain(DOMAIN))
    with psycopg.connect(database, autocommit=True) as db:
        db.execute(BURST)
    targets = [
        ("active_csm_codes", "code", "plan_partner_growth"),
        (TABLE, "issuer", "acme_pm_visa_debit"),
    ]
    commits = [0, 0]
    stop = threading.Event()

    def write(index: int) -> None:
        table, column, key = targets[index]
        with psycopg.connect(database, autocommit=True) as db:
            for n in itertools.count():
                if stop.is_set():
                    return
                db.execute(f"UPDATE {table} SET {column} = %s WHERE key = %s", (f"w{n}", key))
                commits[index] += 1

    limits = httpx.Limits(max_keepalive_connections=0)
    with ExitStack() as stack, httpx.Client(limits=limits, timeout=30) as http:
        server = stack.enter_context(serve_command(*_args(database, "--workers", "1")))
        url = f"http://127.0.0.1:{server.port}"
        _ready(http, url, 0, 1)
        before = _seq(http, url)
        with Probe(url) as probe:
            threads = [threading.Thread(target=write, args=(i,)) for i in (0, 1)]
            started = time.monotonic()
            for thread in threads:
                thread.start()
            time.sleep(size.write_s)
            stop.set()
            for thread in threads:
                thread.join()
            written_s = time.monotonic() - started
            last_served_s = _marked(database, http, url, "after-writers")
            served_at = time.monotonic()
        change_sets = _seq(http, url) - before
        with Probe(url) as drain:
            # The worker's capacity: stopped (SIGSTOP, not restarted) while the burst and a
            # marker after it commit, continued, and timed until it serves the marker.
            table, column, key = MARKER
            marked = _version(http, url, table)
            _signal(server.pid, signal.SIGSTOP)
            try:
                burst_started = time.monotonic()
                with psycopg.connect(database, autocommit=True) as db:
                    db.execute("SET synchronous_commit = off")  # as fast as the server commits
                    db.execute("CALL ic_bench_burst(%s)", (size.burst,))
                burst_s = time.monotonic() - burst_started
                with psycopg.connect(database, autocommit=True) as db:
                    db.execute(
                        f"UPDATE {table} SET {column} = 'after-burst' WHERE key = %s", (key,)
                    )
            finally:
                _signal(server.pid, signal.SIGCONT)
            continued = time.monotonic()
            while _version(http, url, table) in (marked, None):
                if time.monotonic() - continued > 600.0:
                    raise TimeoutError("the burst was not drained within 600 s")
                time.sleep(0.01)
            drained_s = time.monotonic() - continued
    total = sum(commits)
    writers_per_s = total / written_s
    capacity_per_s = (size.burst + 1) / drained_s  # the burst and the marker
    return {
        "commits": total,
        "writers_per_s": writers_per_s,
        "last_served_s": last_served_s,
        "max_lag_s": DEFAULT_MAX_LAG_S,
        "change_sets": change_sets,
        "requests": len(probe.seen),
        "503": sum(1 for s in probe.seen if s.status == 503),
        "after_s": served_at - started,
        "burst": size.burst,
        "burst_committed_per_s": size.burst / burst_s,
        "drained_s": drained_s,
        "capacity_per_s": capacity_per_s,
        "ratio": capacity_per_s / writers_per_s,
        "burst_requests": len(drain.seen),
        "burst_503": sum(1 for s in drain.seen if s.status == 503),
    }


def _report(data: dict[str, Any], size: Size) -> StudyResult:
    r, i, p, c = data["reconcile"], data["idle"], data["propagation"], data["capture"]
    a = data["propagation_alone"]
    held = data.get("held", {})
    rows = [
        [
            f"first start of 2 workers over {r['rows']:,} rows",
            f"ready in {r['start_s']:.1f} s (the registry's first load)",
            "—",
        ],
        [
            f"reconcile {r['rows']:,} rows (2 workers)",
            f"bypass → reconciled {r['bypass_to_reconciled_s']:.1f} s",
            f"{r['503']} of {r['requests']} answered 503",
        ],
        [
            f"another worker starts over {r['rows']:,} rows beside them",
            f"ready (a bypass made meanwhile reconciled) in {r['restart_s']:.1f} s",
            f"{r['restart_503']} of {r['restart_requests']} answered 503",
        ],
        [
            f"idle, 4 workers, {i['seconds']:.0f} s, a transaction idle elsewhere",
            "held: " + ("yes" if i.get("held_s") is not None else "no"),
            f"{i['503']} of {i['requests']} answered 503",
        ],
        *_propagation_rows("nothing held (baseline)", a, "—"),
        *_propagation_rows(
            "idle-in-transaction elsewhere",
            p,
            "held: " + ("yes" if p["idle_in_transaction_elsewhere"] else "no"),
        ),
        [
            "two writers vs one running worker",
            f"{c['writers_per_s']:.0f} commits/s; last served {c['last_served_s'] * 1000:.0f} ms"
            " after they stopped",
            f"{c['503']} of {c['requests']} answered 503",
        ],
        [
            f"the worker drains a burst of {c['burst']:,} transactions",
            f"capacity {c['capacity_per_s']:.0f}/s = {c['ratio']:.2f}× the writers' rate",
            f"{c['burst_503']} of {c['burst_requests']} answered 503",
        ],
    ]
    markdown = markdown_table(["case", "figure", "served"], rows)
    age = held.get("age_at_propagation_s")
    markdown += (
        "\n\nReconciled changes: "
        + ", ".join(f"{t}/{k} {op}" for t, k, op in r["changes"])
        + ". The session idle in a transaction (an xid taken, another database of the cluster)"
        " was opened before the idle case and held through the propagation trials: "
        + (f"{age:.0f} s old when they began" if age is not None else "not held when they began")
        + f". The writers' {c['commits']:,} commits were consumed as {c['change_sets']:,} change"
        " sets (a round consumes every transaction committed since the last as one move); the"
        " worker's capacity is what it consumed per second of consuming a backlog: a burst"
        f" committed by a procedure ({c['burst_committed_per_s']:.0f}/s) while the worker was"
        f" stopped (SIGSTOP), drained in {c['drained_s']:.2f} s from SIGCONT until a marker"
        " committed after it was served; like the writers', each burst transaction updates one"
        " row of one table. The burst's 503s are the worker saying it is behind (expected)."
    )
    checks = [
        Check(
            "0 requests answered 503 while a large table is reconciled",
            str(r["503"]),
            r["503"] == 0,
        ),
        Check(
            "0 requests answered 503 while another worker starts over the large table",
            f"{r['restart_503']} of {r['restart_requests']}",
            r["restart_503"] == 0,
        ),
        Check(
            "0 spurious 503s on an idle healthy database, 4 workers",
            str(i["503"]),
            i["503"] == 0,
        ),
        Check(
            "propagation p99 <= 100 ms with a long transaction elsewhere (watch probe)",
            f"{p['p99_ms']:.1f} ms (poll probe: {_poll(p)})",
            p["p99_ms"] <= 100.0,
        ),
        Check(
            "a running worker keeps up with two writers (capacity >= 1.0× their rate, their last"
            " commit served within the lag bound, no 503)",
            f"{c['ratio']:.2f}×; last served {c['last_served_s']:.2f} s"
            f" (bound {c['max_lag_s']:.0f} s); {c['503']} answered 503",
            c["ratio"] >= 1.0 and c["last_served_s"] <= c["max_lag_s"] and c["503"] == 0,
        ),
    ]
    return StudyResult(NAME, TITLE, markdown, checks, data=data)


def _propagation_rows(case: str, found: dict[str, Any], held: str) -> list[list[str]]:
    """The watch probe's row (the headline) and, labelled, the poll probe's (older results
    have only the poll probe's figures, unlabelled)."""
    if "poll" not in found:
        return [[f"propagation, 4 workers, {case}", _quantiles(found), held]]
    return [
        [f"propagation, 4 workers, {case}: watch probe", _quantiles(found), held],
        ["↳ same, poll probe (§10's: 1 ms polls, ~4,000 req/s)", _quantiles(found["poll"]), held],
    ]


def _quantiles(found: dict[str, Any]) -> str:
    return f"p50 {found['p50_ms']:.1f} ms, p99 {found['p99_ms']:.1f} ms ({found['trials']} trials)"


def _poll(found: dict[str, Any]) -> str:
    poll = found.get("poll")
    return f"p99 {poll['p99_ms']:.1f} ms" if poll else "not run"


def main() -> None:
    """``--rows N``: case 1 alone at ``N`` rows, its figures printed as JSON."""
    from tests.support.postgres import PostgresCluster

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rows", type=int, default=QUICK.rows, help="rows in the large table")
    parser.add_argument("--logs", type=Path, help="a folder to keep the servers' stderr in")
    options = parser.parse_args()
    if options.logs is not None:
        options.logs.mkdir(parents=True, exist_ok=True)
    cluster = PostgresCluster.start()
    try:
        found = reconcile(cluster.database(), Size(options.rows, 0.0, 0, 0.0, 0), options.logs)
    finally:
        cluster.stop()
    print(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
