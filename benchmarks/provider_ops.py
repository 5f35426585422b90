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
2. Idle: ``serve --workers 4``, nothing written, the same client for ``idle_s``: 503s.
3. Propagation: four ``serve`` processes (``production.propagation``: COMMIT → the slowest of the
   four has the new version, p50/p99) while another database of the same server holds a
   session idle in a transaction that took a transaction id (it holds the cluster's xmin); first
   the same with nothing held (the run's baseline). Two probes, each on its own four workers:
   the headline ``watch`` (one ``GET /contract/watch`` stream per worker; the time its event for
   the new position arrives: what a watching agent sees, and the probe loads nothing) and
   ``poll`` (``GET /contract/versions`` on each worker every millisecond, §10's probe: ~4,000
   requests/s on the workers' own request loops, so it measures propagation under that load).
4. Sustained capture: ``serve --workers 1``; two writer threads commit single-row UPDATEs (one
   table each, every commit a change) as fast as they can for ``write_s``; reported: their
   commits/s, the worker's consumed rate (commits over the first COMMIT → the worker's last move,
   its ``contract_seq`` then still for 2 s), the ratio, and 503s meanwhile.

``python -m benchmarks.provider_ops --rows 1000000`` runs case 1 alone at that size and prints
its figures as JSON (the study keeps ``FULL``'s 20,000 rows).
"""

from __future__ import annotations

import argparse
import itertools
import json
import threading
import time
from contextlib import ExitStack
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


FULL = Size(rows=20_000, idle_s=120.0, trials=60, write_s=20.0)
QUICK = Size(rows=5_000, idle_s=5.0, trials=5, write_s=2.0)


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    size = QUICK if quick else FULL
    data: dict[str, Any] = {}
    with postgres_cluster() as cluster:
        data["reconcile"] = reconcile(cluster.database(), size)
        data["idle"] = idle(cluster.database(), size)
        data["propagation_alone"] = propagation(cluster.database(), None, size)
        data["propagation"] = propagation(cluster.database(), cluster.database(), size)
        data["capture"] = capture(cluster.database(), size)
    return _report(data, size)


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


def reconcile(database: str, size: Size) -> dict[str, Any]:
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
    args = _args(database, "--workers", "2", "--reconcile-interval", "1")
    ready_s = 90.0 + size.rows / 1000.0  # a registry's first load grows with the table

    def bypass(key: str) -> None:
        with psycopg.connect(database) as db:
            db.execute(f"ALTER TABLE {TABLE} DISABLE TRIGGER ic_capture")
            db.execute(f"UPDATE {TABLE} SET issuer = 'Bypassed' WHERE key = %s", (key,))
            db.execute(f"ALTER TABLE {TABLE} ENABLE ALWAYS TRIGGER ic_capture")

    with ExitStack() as stack, httpx.Client(limits=limits, timeout=30) as http:
        started = time.monotonic()
        server = stack.enter_context(serve_command(*args, ready_s=ready_s))
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
            restarted = time.monotonic()
            more = _args(database, "--workers", "1", "--reconcile-interval", "3600")
            other = stack.enter_context(serve_command(*more, ready_s=ready_s))
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


def capture(database: str, size: Size) -> dict[str, Any]:
    import psycopg
    from tests.service.probes import Probe

    create_tables(database, get_domain(DOMAIN))
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
            total = sum(commits)
            seq = _seq(http, url)
            moved_at, deadline = time.monotonic(), time.monotonic() + 300.0
            while time.monotonic() - moved_at < 2.0 and time.monotonic() < deadline:
                now = _seq(http, url)
                if now != seq:
                    seq, moved_at = now, time.monotonic()
                time.sleep(0.02)
            consumed_s = max(moved_at, time.monotonic() - 2.0) - started
            change_sets = seq - before
    return {
        "commits": total,
        "writers_per_s": total / written_s,
        "consumed_per_s": total / consumed_s,
        "ratio": written_s / consumed_s,
        "change_sets": change_sets,
        "requests": len(probe.seen),
        "503": sum(1 for s in probe.seen if s.status == 503),
    }


def _report(data: dict[str, Any], size: Size) -> StudyResult:
    r, i, p, c = data["reconcile"], data["idle"], data["propagation"], data["capture"]
    a = data["propagation_alone"]
    rows = [
        [
            f"reconcile {r['rows']:,} rows (2 workers)",
            f"bypass → reconciled {r['bypass_to_reconciled_s']:.1f} s",
            f"{r['503']} of {r['requests']} answered 503",
        ],
        [
            f"idle, 4 workers, {i['seconds']:.0f} s",
            "—",
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
            f"{c['writers_per_s']:.0f} commits/s; consumed {c['consumed_per_s']:.0f}/s"
            f" (ratio {c['ratio']:.2f})",
            f"{c['503']} of {c['requests']} answered 503",
        ],
    ]
    markdown = markdown_table(["case", "figure", "served"], rows)
    markdown += (
        f"\n\nWorkers started over the {r['rows']:,}-row table in {r['start_s']:.1f} s (the"
        " registry's first load). Reconciled changes: "
        + ", ".join(f"{t}/{k} {op}" for t, k, op in r["changes"])
        + f". The writers' {c['commits']:,} commits were consumed as {c['change_sets']:,} change"
        " sets (a round consumes every transaction committed since the last as one move)."
    )
    checks = [
        Check(
            "0 requests answered 503 while a large table is reconciled",
            str(r["503"]),
            r["503"] == 0,
        ),
        Check(
            "0 spurious 503s on an idle healthy database, 4 workers", str(i["503"]), i["503"] == 0
        ),
        Check(
            "propagation p99 <= 100 ms with a long transaction elsewhere (watch probe)",
            f"{p['p99_ms']:.1f} ms (poll probe: {_poll(p)})",
            p["p99_ms"] <= 100.0,
        ),
        Check(
            "a running worker keeps up with two writers (ratio >= 1.0)",
            f"{c['ratio']:.2f}",
            c["ratio"] >= 1.0,
        ),
    ]
    if "restart_s" in r:
        markdown += (
            f" Another worker started over it in {r['restart_s']:.1f} s (a bypass made meanwhile"
            f" reconciled by its start); the serving workers answered {r['restart_503']} of"
            f" {r['restart_requests']} requests 503 meanwhile."
        )
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
    rows = parser.parse_args().rows
    cluster = PostgresCluster.start()
    try:
        found = reconcile(cluster.database(), Size(rows, 0.0, 0, 0.0))
    finally:
        cluster.stop()
    print(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
