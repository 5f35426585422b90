"""Study — worker recovery (issue 21): how long until every worker is ready again after its
PostgreSQL LISTEN connections are terminated, and after PostgreSQL restarts; and how many
responses carried a stamp the worker had not verified (the target is 0).

Setup: the Acme domain with its tables and registry in one PostgreSQL database (embedded, started
by the study), ``invalidation-contracts serve --workers N``. A prober thread sends
``GET /contract/versions`` on fresh connections throughout. One round of the *LISTEN kill*: every
backend whose ``application_name`` is the workers' wake-up connection is terminated with
``pg_terminate_backend``, a plain-psycopg UPDATE commits, and the clock runs from that COMMIT
until ``N`` distinct worker processes answer ``/contract/ready`` 200 at the new seq. One round of
the *restart*: ``pg_ctl stop -m fast``, 1 s down, ``pg_ctl start``, and the clock runs from the
start command's return until every worker is ready at the seq of an UPDATE committed right after.
A response is *unverified* when it was requested more than ``max_lag_s`` after a COMMIT and
carries an older seq (SPEC §8.2.5), or was requested while the database was down past that bound
and is not a 503.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from invalidation_contracts.domains import get_domain
from invalidation_contracts.server.sql import create_tables
from invalidation_contracts.server.store.postgres import LISTENER_APPLICATION_NAME
from invalidation_contracts.server.worker.timing import DEFAULT_MAX_LAG_S

from .common import Check, StudyResult, markdown_table
from .servers import serve_command

NAME = "recovery"
TITLE = "Worker recovery: LISTEN kill and PostgreSQL restart"
KEY = "plan_partner_growth"
READY_BOUND_S = 60.0


@dataclass(frozen=True, slots=True)
class Size:
    workers: int
    kills: int
    restarts: int


FULL = Size(workers=4, kills=10, restarts=5)
QUICK = Size(workers=2, kills=3, restarts=2)


@dataclass
class Prober:
    """``GET /contract/versions`` on fresh connections, each answer with when it was asked."""

    url: str
    seen: list[tuple[float, int, int | None]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        limits = httpx.Limits(max_keepalive_connections=0)
        with httpx.Client(limits=limits, timeout=10.0) as http:
            while not self._stop.is_set():
                sent = time.monotonic()
                try:
                    answer = http.get(self.url + "/contract/versions")
                except httpx.TransportError:
                    continue
                seq = answer.json().get("contract_seq") if answer.status_code == 200 else None
                self.seen.append((sent, answer.status_code, seq))
                self._stop.wait(0.02)

    def stop(self) -> None:
        self._stop.set()


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    from tests.support.postgres import PostgresCluster

    size = QUICK if quick else FULL
    cluster = PostgresCluster.start()
    try:
        database = cluster.database()
        create_tables(database, get_domain("acme_billing"))
        args = ("--domain", "acme_billing", "--database", database, "--db", database)
        with serve_command(*args, "--workers", str(size.workers)) as server:
            url = f"http://127.0.0.1:{server.port}"
            data = _rounds(cluster, database, url, size)
    finally:
        cluster.stop()
    kill, restart = data["kill_s"], data["restart_s"]
    rows = [
        ["LISTEN connections terminated", *_figures(kill), str(len(kill))],
        ["PostgreSQL restarted", *_figures(restart), str(len(restart))],
    ]
    md = (
        f"{size.workers} workers (`serve --workers {size.workers}`), Acme tables and registry in "
        f"one embedded PostgreSQL; lag bound {DEFAULT_MAX_LAG_S:g} s. Seconds until every worker "
        "answers `/contract/ready` 200 at the new seq:\n\n"
        + markdown_table(["fault", "p50 (s)", "p99 (s)", "max (s)", "rounds"], rows)
        + f"\n\nResponses probed: {data['probed']}; 503 while recovering: {data['unavailable']};"
        f" **unverified stamps: {data['unverified']}**."
    )
    checks = [
        Check(
            "0 responses with unverified stamps (issue 21)",
            f"{data['unverified']} of {data['probed']}",
            data["unverified"] == 0,
        ),
        Check(
            "every worker ready again by itself after each fault",
            "yes" if data["all_ready"] else "no (a round timed out)",
            data["all_ready"],
        ),
    ]
    return StudyResult(NAME, TITLE, md, checks, [], data)


def _rounds(cluster: Any, database: str, url: str, size: Size) -> dict[str, Any]:
    import psycopg

    def commit(code: str) -> float:
        with psycopg.connect(database) as db:
            db.execute("UPDATE active_csm_codes SET code = %s WHERE key = %s", (code, KEY))
        return time.monotonic()

    prober = Prober(url)
    thread = threading.Thread(target=prober.run, daemon=True)
    seq, all_ready = 0, True
    kills: list[float] = []
    restarts: list[float] = []
    commits: list[tuple[float, int]] = []
    outages: list[tuple[float, float]] = []
    all_ready &= _ready(url, size.workers, seq) is not None
    thread.start()
    try:
        for trial in range(size.kills):
            with psycopg.connect(database, autocommit=True) as db:
                db.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = %s",
                    (LISTENER_APPLICATION_NAME,),
                )
            committed = commit(f"KILL{trial}")
            seq += 1
            commits.append((committed, seq))
            ready = _ready(url, size.workers, seq)
            all_ready &= ready is not None
            if ready is not None:
                kills.append(ready - committed)
        for trial in range(size.restarts):
            cluster.halt()
            down = time.monotonic()
            time.sleep(1.0)
            back = time.monotonic()
            cluster.resume()
            started = time.monotonic()
            outages.append((down, back))
            committed = commit(f"RESTART{trial}")
            seq += 1
            commits.append((committed, seq))
            ready = _ready(url, size.workers, seq)
            all_ready &= ready is not None
            if ready is not None:
                restarts.append(ready - started)
        time.sleep(DEFAULT_MAX_LAG_S)
    finally:
        prober.stop()
        thread.join(30)
    unverified = sum(
        1
        for sent, status, got in prober.seen
        if status == 200
        and (
            any(got is not None and got < s and sent > c + DEFAULT_MAX_LAG_S for c, s in commits)
            or any(d + DEFAULT_MAX_LAG_S < sent < b for d, b in outages)
        )
    )
    return {
        "kill_s": kills,
        "restart_s": restarts,
        "probed": len(prober.seen),
        "unavailable": sum(1 for _, status, _ in prober.seen if status == 503),
        "unverified": unverified,
        "all_ready": all_ready,
        "workers": size.workers,
    }


def _ready(url: str, workers: int, seq: int) -> float | None:
    """When ``workers`` distinct processes first said ready at ``seq`` (None: not in time)."""
    ready: set[int] = set()
    deadline = time.monotonic() + READY_BOUND_S
    limits = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(limits=limits, timeout=10.0) as http:
        while time.monotonic() < deadline:
            try:
                answer = http.get(url + "/contract/ready")
            except httpx.TransportError:
                continue
            body = answer.json()
            if answer.status_code == 200 and body.get("contract_seq", -1) >= seq:
                ready.add(body["pid"])
                if len(ready) >= workers:
                    return time.monotonic()
            time.sleep(0.01)
    return None


def _figures(values: Sequence[float]) -> list[str]:
    if not values:
        return ["—", "—", "—"]
    ordered = sorted(values)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return [f"{at(0.5):.2f}", f"{at(0.99):.2f}", f"{ordered[-1]:.2f}"]
