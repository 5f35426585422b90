"""A worker killed with SIGKILL under load (docs/SPEC.md §8.2.5, docs/providers.md §7).

``serve --workers 2`` runs under uvicorn's supervisor. While a client keeps asking every worker for
its stamps and a second process commits plain-SQL writes to the provider's tables, one worker (the
one leading the capture: a PostgreSQL advisory lock, a SQLite ``flock``) is killed with ``kill -9``
— whatever it held (a write transaction, the capture lead, a SQLite lock) is released by the
database or the kernel, never by the worker. The promise: no answer carries an unverified stamp
(every stamp a request sent past the lag bound sees includes every write committed before), every
committed write reaches the changes feed, the agent keeps no stale fix and loses no valid one, and
the service recovers by itself: the supervisor starts a new worker in the dead one's place, and both
serve. And no epoch is minted: wherever the kill lands in a registry write, every worker still
serves the epoch it served before, so no client resyncs and no valid fix is dropped. A kill at a
random moment rarely lands inside a write, so the test also makes a worker kill itself (SIGKILL,
``server/store/crashpoints.py``) at each step of one of its registry writes: before the COMMIT,
right after it, and (SQLite) while the high-water mark is being replaced. On PostgreSQL that worker
is the capture's leader, killed in the middle of consuming a captured write: before its COMMIT the
capture records stay unconsumed for the next leader; after it they are consumed, and the others
adopt the change (a PostgreSQL registry keeps no mark, so it has no third step)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.service.agent import Agent
from tests.service.probes import UNAVAILABLE, Probe, ready_reports
from tests.support.processes import serving

from invalidation_contracts.domains import get_catalog, get_domain
from invalidation_contracts.server.sql import create_tables
from invalidation_contracts.server.store.crashpoints import CRASH_ENV, STEPS

WORKERS = 2
WRITES = 60
ROTATED = "WINTERLAUNCH26"  # a code promo_eligibility recognises
FAMILIES = (
    "governed-partner-growth",
    "funding-enterprise-annual",
    "control-partner-starter",
    "control-agency-pro",
    "plain-starter-monthly",
)
LEARNED = [
    "ADD_REQUIRED_PROMO_CODE plan_agency_pro",
    "ADD_REQUIRED_PROMO_CODE plan_partner_growth",
    "ADD_REQUIRED_PROMO_CODE plan_partner_starter",
    "USE_REQUIRED_FUNDING_TYPE plan_enterprise_annual",
]
FEED_BOUND_S = 60.0

# The second process: plain SQL, one committed write at a time, each acknowledged on stdout with
# the moment its COMMIT returned (CLOCK_MONOTONIC is one clock for every process on the machine).
# Half-way through it rotates the governed code, the write that makes one learned fix stale.
WRITER = """
import json, sys, time
kind, target, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
if kind == "sqlite":
    import sqlite3
    db = sqlite3.connect(target, timeout=30)
else:
    import psycopg
    db = psycopg.connect(target)
for i in range(count):
    if i == count // 2:
        key = "plan_partner_growth"
        db.execute(f"UPDATE active_csm_codes SET code = '{sys.argv[4]}' WHERE key = '{key}'")
    else:
        key = f"kill_{i:03d}"
        db.execute(f"INSERT INTO active_csm_codes VALUES ('{key}', 'K{i}', 'csm_kill')")
    db.commit()
    print(json.dumps({"key": key, "at": time.monotonic()}), flush=True)
    time.sleep(0.05)
db.close()
"""


CRASH_AT_MOVE = 4  # the worker's 4th registry write: past its open, while the writes flow


@dataclass(frozen=True)
class Store:
    """Where the provider's tables and the registry live, how the writer reaches them, and how
    the worker dies: ``kill`` (the test's ``kill -9`` at a moment of its choosing) or a step of
    a registry write at which the first worker to reach it kills itself."""

    kind: str
    database: str  # --database
    registry: str  # --db
    raw: str  # what the writer connects to
    death: str


@pytest.fixture(
    params=[
        ("sqlite", "kill"),
        pytest.param(("postgres", "kill"), marks=pytest.mark.postgres),
        # PostgreSQL read by logical decoding (serve --capture logical), killed the same way.
        pytest.param(("logical", "kill"), marks=pytest.mark.postgres),
        # Each named step, at full scale: grid-sized, so in CI's study step (`pytest -m study`);
        # test_registry_crash.py kills a writer at every step of both stores in the default run.
        *[pytest.param(("sqlite", step), marks=pytest.mark.study) for step in STEPS],
        *[
            pytest.param(("postgres", step), marks=[pytest.mark.postgres, pytest.mark.study])
            for step in ("before-commit", "after-commit")
        ],
    ],
    ids=lambda case: "-".join(case),
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    kind, death = request.param
    if kind == "sqlite":
        path = tmp_path / "acme.db"
        registry = str(tmp_path / "registry.sqlite")
        store = Store(kind, f"sqlite:///{path}", registry, str(path), death)
    else:
        url = request.getfixturevalue("postgres_url")
        store = Store(kind, url, url, url, death)
    create_tables(store.database, get_domain("acme_billing"))
    yield store


@dataclass(frozen=True)
class Write:
    key: str
    at: float


def start_writer(store: Store) -> subprocess.Popen[str]:
    command = [sys.executable, "-c", WRITER, store.kind, store.raw, str(WRITES), ROTATED]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def victim(reports: dict[int, dict[str, Any]]) -> int:
    """The worker consuming the capture (one leads it, on PostgreSQL and SQLite), else the first."""
    leading = [pid for pid, body in reports.items() if all(body["capture_leader"].values())]
    return min(leading or reports)


def wait_gone(token: Path) -> None:
    """Until a worker took the crash token (bounded)."""
    deadline = time.monotonic() + FEED_BOUND_S
    while token.exists():
        assert time.monotonic() < deadline, "no worker reached the crash step"
        time.sleep(0.01)


def feed_with(url: str, keys: set[str]) -> dict[str, Any]:
    """``/contract/changes?since=0`` once it names every key in ``keys`` (bounded)."""
    deadline = time.monotonic() + FEED_BOUND_S
    while True:
        answer = httpx.get(url + "/contract/changes", params={"since": 0}, timeout=10)
        if answer.status_code == 503:  # a worker not yet confirmed current: it may say so
            assert answer.json()["type"] == UNAVAILABLE, answer.text
            missing = keys
        else:
            assert answer.status_code == 200, answer.text
            feed = answer.json()
            missing = keys - {row["key"] for row in feed["rows"]}
            if not missing:
                return dict(feed)
        assert time.monotonic() < deadline, f"acknowledged writes never reached the feed: {missing}"
        time.sleep(0.1)


@pytest.mark.workers
def test_a_worker_killed_with_sigkill_under_writes_serves_no_unverified_stamp_and_is_replaced(
    store: Store, tmp_path: Path
) -> None:
    catalog = get_catalog("acme_billing")
    args = ["--domain", "acme_billing", "--database", store.database, "--db", store.registry]
    if store.kind == "logical":
        args += ["--capture", "logical"]
    token = tmp_path / "crash-token"  # the one crash: taken by the first worker to get there
    env = {}
    if store.death != "kill":
        token.touch()
        env[CRASH_ENV] = f"{store.death}:{CRASH_AT_MOVE}:{token}"
    with ExitStack() as stack:
        logs = tmp_path / "logs"
        url = stack.enter_context(serving([*args, "--workers", str(WORKERS)], logs, env=env))
        before = ready_reports(url, WORKERS, 0)
        agent = Agent([url], keepalive=False)  # a connection per request: both workers answer
        stack.callback(agent.close)
        for family in FAMILIES:
            assert agent.solve(catalog.family(family).draft()) > 0
        assert agent.live() == LEARNED

        with Probe(url) as probe:
            writer = start_writer(store)
            assert writer.stdout is not None
            first = writer.stdout.readline()  # the first write is acknowledged: writes flow
            assert first, "the writer made no write"
            if store.death == "kill":
                time.sleep(0.3)
                os.kill(victim(before), signal.SIGKILL)
            else:
                wait_gone(token)  # a worker reached the step and killed itself there
            killed_at = time.monotonic()
            rest, _ = writer.communicate(timeout=120)
            assert writer.returncode == 0
            writes = [Write(**json.loads(line)) for line in [first, *rest.splitlines()]]
            assert len(writes) == WRITES
            assert writes[0].at < killed_at < writes[-1].at, "the kill came while writes flowed"

            # No new epoch, wherever the kill landed (store/highwater.py, docs/providers.md §7).
            epoch = next(iter(before.values()))["contract_epoch"]
            epochs = {body["contract_epoch"] for body in ready_reports(url, WORKERS, 0).values()}
            assert epochs == {epoch}, f"the kill minted a new epoch: {epoch} -> {epochs}"

            # Nothing lost: every acknowledged write is in the changes feed.
            feed = feed_with(url, {w.key for w in writes})
            seq_of = {row["key"]: row["seq"] for row in feed["rows"]}
            # Recovery by itself: the supervisor replaced the killed worker; both are ready.
            after = ready_reports(url, WORKERS, feed["last_seq"])
            assert len(set(before) - set(after)) == 1, "exactly one worker died"
            assert set(after) - set(before), "a new worker took the killed one's place"
            assert {body["contract_epoch"] for body in after.values()} == {epoch}
            time.sleep(2.5)  # past the lag bound of the last write, still probing

        # No unverified stamp: past the lag bound of each write, every stamp includes it.
        late = {w.key: probe.unverified(w.at, seq_of[w.key]) for w in writes}
        assert {key: seen for key, seen in late.items() if seen} == {}
        served_after_kill = [s for s in probe.seen if s.sent > killed_at and s.status == 200]
        assert served_after_kill, "the surviving worker kept serving"
        assert any(s.seq == feed["last_seq"] for s in probe.seen)

        # The agent: exactly the rotated fix evicted and learned again; no 410, no valid fix lost.
        for family in FAMILIES:
            assert agent.solve(catalog.family(family).draft()) > 0
        assert agent.evictions() == [("ADD_REQUIRED_PROMO_CODE plan_partner_growth", "row-changed")]
        assert agent.live() == LEARNED
        [governed] = [
            e
            for e in agent.memory.entries("http://acme.test")
            if (e.suggestion.scope or {}).get("plan") == "plan_partner_growth"
        ]
        assert governed.suggestion.parameters == {"promo_code": ROTATED}
        assert agent.recorder.count(410) == 0
