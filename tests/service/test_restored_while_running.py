"""A history restored under running workers gets a new epoch at their next follower check
(issue 26; SPEC §1), not only when they reopen.

Two workers (each its own store object and registry over one SQLite file or one PostgreSQL
schema) serve a history; a backup is taken, more changes are served, and the backup is restored
while both keep running — SQLite through its online backup API into the live file, PostgreSQL by
``pg_dump`` restored with ``psql``. At its next check (``Registry.sync``, what the follower runs
every poll or heartbeat) each worker finds the history is not the one its last commit left,
and the first to look starts a new epoch under the writers' lock; the other adopts that same
epoch. A client past the restore point is told to resync (410), and no seq is served twice in
one epoch — whether the first move after the restore is a check or a write.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import httpx
import psycopg
import pytest
from tests.service.agent import ORIGIN, Agent
from tests.service.test_restored_history_postgres import (
    assert_resync_required,
    copy_rows,
    dump,
    restore_dump,
)
from tests.support.processes import serving

from invalidation_contracts.domains import get_catalog
from invalidation_contracts.server import Domain, Registry
from invalidation_contracts.server.store import SQLiteRegistryStore
from invalidation_contracts.server.store.dialect import StorageError
from invalidation_contracts.server.store.postgres import DEFAULT_SCHEMA, PostgresRegistryStore


def reload(registry: Registry, n: int, tag: str = "n") -> None:
    rows = registry.state.tables["plans"].plain_rows()
    for i in range(n):
        registry.reload("plans", {**rows, "basic": {**rows["basic"], "note": f"{tag}{i}"}})


class Backend:
    """Two running workers over one registry, and how to back it up and restore it live."""

    def __init__(
        self,
        open_store: Callable[[], object],
        save: Callable[[], None],
        put_back: Callable[[], None],
        domain: Domain,
    ) -> None:
        self.stores = [open_store(), open_store()]
        self.a, self.b = (store.open_registry(domain) for store in self.stores)  # type: ignore[attr-defined]
        self.save, self.put_back = save, put_back

    def close(self) -> None:
        for store in self.stores:
            store.close()  # type: ignore[attr-defined]


def sqlite_live_copy(source: Path, target: Path) -> None:
    """``source`` copied into ``target`` through SQLite's online backup (locks respected)."""
    with closing(sqlite3.connect(source)) as src, closing(sqlite3.connect(target)) as dst:
        src.backup(dst)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def workers(request: pytest.FixtureRequest, domain: Domain, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        db, copy = tmp_path / "registry.db", tmp_path / "backup.db"
        backend = Backend(
            lambda: SQLiteRegistryStore(db),
            lambda: sqlite_live_copy(db, copy),
            lambda: sqlite_live_copy(copy, db),
            domain,
        )
    else:
        url: str = request.getfixturevalue("postgres_url")
        dumped = tmp_path / "registry.sql"
        backend = Backend(
            lambda: PostgresRegistryStore(url),
            lambda: dump(url, dumped),
            lambda: restore_dump(url, dumped),
            domain,
        )
    yield backend
    backend.close()


def serve_then_restore(w: Backend) -> tuple[str, int]:
    """Serve 2 changes, back up, serve 3 more (both workers follow), restore live; returns the
    position of a client that saw everything."""
    reload(w.a, 2)
    w.b.sync()
    w.save()
    reload(w.a, 3)
    w.b.sync()
    client = (w.a.state.epoch, w.a.state.seq)
    assert (w.b.state.epoch, w.b.state.seq) == client
    w.put_back()
    return client


def test_running_workers_adopt_one_new_epoch_at_their_next_check(workers: Backend) -> None:
    client = serve_then_restore(workers)

    workers.b.sync()
    workers.a.sync()

    assert workers.b.state.epoch != client[0]
    assert workers.a.state.epoch == workers.b.state.epoch  # one new epoch, adopted by both
    assert workers.a.state.seq == workers.b.state.seq
    for registry in (workers.a, workers.b):
        assert_resync_required(registry, *client)
    assert workers.a.state.tables["plans"].plain_rows()["basic"]["note"] == "n1"  # the backup's


def test_a_write_after_a_live_restore_lands_in_a_new_epoch(workers: Backend) -> None:
    client = serve_then_restore(workers)
    served = {client}

    reload(workers.a, 3, tag="after")  # the first move after the restore is a write
    workers.b.sync()

    assert workers.a.state.epoch != client[0]
    assert (workers.b.state.epoch, workers.b.state.seq) == (
        workers.a.state.epoch,
        workers.a.state.seq,
    )
    assert (workers.a.state.epoch, workers.a.state.seq) not in served
    assert_resync_required(workers.b, *client)
    assert workers.b.state.tables["plans"].plain_rows()["basic"]["note"] == "after2"


def test_checks_and_writes_without_a_restore_keep_the_epoch(workers: Backend) -> None:
    epoch = workers.a.state.epoch
    for i in range(6):
        writer, follower = (workers.a, workers.b) if i % 2 else (workers.b, workers.a)
        reload(writer, 2, tag=f"w{i}")
        follower.sync()
        writer.sync()

    assert workers.a.state.epoch == workers.b.state.epoch == epoch
    assert workers.a.state.seq == workers.b.state.seq == 12


# -- end to end: `serve --workers 2` on PostgreSQL, restored with pg_dump/psql while it runs -----

TOKEN = "restore-admin-token"
GOVERNED = "governed-partner-growth"


def positions_seen(url: str, n: int = 8) -> set[tuple[str, int]]:
    """The ``(epoch, seq)`` ``n`` fresh connections are answered with (the workers take turns);
    a worker that cannot vouch for its state yet (503 while the schema is being restored) counts
    as ``("unavailable", -1)``."""
    seen = set()
    for _ in range(n):
        answer = httpx.get(url + "/contract/versions", headers={"connection": "close"})
        body = answer.json()
        ok = answer.status_code == 200
        seen.add((body["contract_epoch"], body["contract_seq"]) if ok else ("unavailable", -1))
    return seen


def settle(url: str, done: Callable[[tuple[str, int]], bool]) -> tuple[str, int]:
    """Wait (bounded) until every worker answers one position that ``done`` accepts."""
    deadline = time.monotonic() + 20
    while True:
        seen = positions_seen(url)
        if len(seen) == 1 and done(next(iter(seen))):
            return next(iter(seen))
        assert time.monotonic() < deadline, f"workers still answer {seen}"
        time.sleep(0.2)


def governed_codes(agent: Agent, draft: dict) -> list[str]:
    """The promo codes the memory would inject into ``draft`` now."""
    return [
        e.suggestion.parameters.get("promo_code", "")
        for e in agent.memory.lookup(ORIGIN, draft, operation="POST /v1/subscriptions").entries
    ]


@pytest.mark.workers
@pytest.mark.postgres
def test_serve_workers_adopt_a_new_epoch_after_a_live_pg_restore_and_serve_no_stale_fix(
    postgres_url: str, tmp_path: Path
) -> None:
    catalog = get_catalog("acme_billing")
    draft = catalog.family(GOVERNED).draft()
    dumped = tmp_path / "registry.sql"
    args = ["--domain", "acme_billing", "--db", postgres_url, "--workers", "2"]
    env = {"INVALIDATION_CONTRACTS_ADMIN_TOKEN": TOKEN}
    with serving(args, tmp_path / "logs", env=env) as url:
        agent = Agent([url], keepalive=False)
        try:
            assert agent.solve(draft) > 0  # learns the governed code
            before = governed_codes(agent, draft)
            old_epoch, _ = settle(url, lambda _: True)
            dump(postgres_url, dumped)
            rotation = catalog.read_snapshot("active_csm_codes.rotation-1")
            answer = httpx.post(
                url + "/admin/reload-table",
                json={"table": rotation.table, "rows": rotation.rows},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            assert answer.status_code == 200, answer.text
            seq = answer.json()["contract_seq"]
            settle(url, lambda at: at[1] == seq)  # both workers serve the rotation
            assert agent.solve(draft) > 0  # relearns the rotated code
            rotated = governed_codes(agent, draft)
            assert rotated != before

            restore_dump(postgres_url, dumped)  # the pre-rotation registry, workers running
            settle(url, lambda at: at[0] not in (old_epoch, "unavailable"))

            agent.http.get("/contract/versions")  # any answer carries the new epoch
            assert not set(rotated) & set(governed_codes(agent, draft))  # the stale fix is gone
            assert agent.solve(draft) > 0
            assert governed_codes(agent, draft) == before  # the restored code, relearned
            for _ in range(3):
                assert agent.solve(draft) == 1  # no stale fix: the first attempt is accepted
        finally:
            agent.close()


@pytest.mark.postgres
def test_a_restore_still_under_way_is_waited_for_not_served(
    domain: Domain, postgres_url: str
) -> None:
    """``pg_dump``'s script fills ``meta`` before ``rows``, ``rules`` and ``tables`` (its
    constraints come last): a worker that looks in between sees a restored history with no
    tables. It serves nothing of it (the check fails, the
    worker keeps its state and says why) and starts the new epoch once the restore is whole."""
    stores = [PostgresRegistryStore(postgres_url), PostgresRegistryStore(postgres_url)]
    try:
        a, b = (store.open_registry(domain) for store in stores)
        reload(a, 2)
        saved = copy_rows(postgres_url)
        reload(a, 3)
        b.sync()
        held = b.state
        with psycopg.connect(postgres_url) as db:  # the restore, all but the tables
            for table in ("rows", "log", "rules", "positions", "tables", "meta"):
                db.execute(f"DELETE FROM {DEFAULT_SCHEMA}.{table}")
            for table in ("meta", "log", "positions"):
                for row in saved[table]:
                    marks = ", ".join(["%s"] * len(row))
                    db.execute(f"INSERT INTO {DEFAULT_SCHEMA}.{table} VALUES ({marks})", row)

        with pytest.raises(StorageError, match="waiting for a complete registry"):
            b.sync()
        assert b.state is held

        with psycopg.connect(postgres_url) as db:  # the restore completes
            for table in ("tables", "rows", "rules"):
                for row in saved[table]:
                    marks = ", ".join(["%s"] * len(row))
                    db.execute(f"INSERT INTO {DEFAULT_SCHEMA}.{table} VALUES ({marks})", row)
        b.sync()
        a.sync()
    finally:
        for store in stores:
            store.close()

    assert b.state.epoch != held.epoch and a.state.epoch == b.state.epoch
    assert b.state.tables["plans"].plain_rows()["basic"]["note"] == "n1"
