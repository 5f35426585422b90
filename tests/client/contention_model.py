"""Processes contending for one shared memory, for the contention tests and benchmark.

One origin holds ``entries`` fixes that depend on table ``t0``; writer processes keep storing
small fixes (on ``t1``) in a tight loop; reader processes keep looking fixes up; a mover observes
a new version of ``t0`` — one call that evicts every ``t0`` fix. Every call is journalled with
``time.monotonic()`` (one clock for every process on the host) before and after it, and any
``StoreError`` is recorded: a give-up shows there.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import time
from pathlib import Path
from typing import Any

from invalidation_contracts.client import FixMemory, SQLiteStore, StoreError
from invalidation_contracts.client.limits import Limits
from invalidation_contracts.client.stores import Op, PutOp, Result, Store
from invalidation_contracts.client.values import Observed

ORIGIN = "https://contention.test"
LIMITS = Limits(max_suggestions=1000, max_entries_per_origin=1_000_000)
REQUEST = {"item": "x"}
CONTEXT = multiprocessing.get_context("fork")


def contract(version: str) -> dict[str, Any]:
    seq = 0 if version == "1.0.0" else 1
    return {
        "table_versions": {"t0": version, "t1": "1"},
        "contract_seq": seq,
        "contract_epoch": "e",
    }


def fix(name: str, table: str, version: str) -> dict[str, Any]:
    return {
        "type": name,
        "parameters": {"value": name},
        "action": "add_field",
        "cache_hint": "cacheable",
        "scope": REQUEST,
        "tables": [{"table": table, "version": version, "keys": [name]}],
    }


def failure(fixes: list[dict[str, Any]], version: str = "1.0.0") -> dict[str, Any]:
    return {
        "type": "urn:x:policy",
        "title": "t",
        "status": 422,
        "success": False,
        "recovery_feedback": {"suggestions": fixes},
        **contract(version),
    }


def open_store(where: str) -> Any:
    if where.startswith("postgres"):
        from invalidation_contracts.client.stores import PostgresStore

        return PostgresStore(where, listen=False)
    return SQLiteStore(where, synchronous="NORMAL")


def memory(where: str, store: Store | None = None) -> FixMemory:
    store = store if store is not None else open_store(where)
    return FixMemory("table", store=store, limits=LIMITS, close_store=True)


class StallBeforeRecord(Store):
    """A store that, asked to commit an eviction record, writes the time to ``flag`` and hangs
    there (until the process is killed): a mover stopped between announcing its move (the turn,
    ``client.shared.turn``) and committing it."""

    def __init__(self, inner: Store, flag: Path) -> None:
        self.inner, self.flag = inner, Path(flag)

    def batch(self, ops: Any) -> list[Result]:
        ops = list(ops)
        if any(_records_put(op) for op in ops):
            self.flag.write_text(str(time.monotonic()))
            while True:
                time.sleep(1)
        return self.inner.batch(ops)

    def version(self) -> Any:
        return self.inner.version()

    def close(self) -> None:
        self.inner.close()


def _records_put(op: Op) -> bool:
    return isinstance(op, PutOp) and op.namespace[-1] == "records" and op.value is not None


def seed(where: str, entries: int) -> None:
    """``entries`` fixes on ``t0`` (named ``F0``, ``F1``, ...)."""
    with memory(where) as m:
        for start in range(0, entries, 1000):
            batch = [fix(f"F{i}", "t0", "1.0.0") for i in range(start, min(entries, start + 1000))]
            m.observe(ORIGIN, Observed(REQUEST, 422, failure(batch)))


def _journal(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as out:
        out.write(json.dumps(record) + "\n")


def moved(journal: Path) -> Path:
    """The flag that says the server has committed the new version of ``t0``."""
    return Path(journal).parent / "moved"


def server_version(journal: Path) -> str:
    """What the server stamps ``t0`` with now."""
    return "2.0.0" if moved(journal).exists() else "1.0.0"


def writer(where: str, name: str, journal: Path, pause_s: float = 0.0) -> None:
    """Store a small fix on ``t1`` again and again, until killed (each answer stamped with the
    server's current version of ``t0``: after the move, a writer may be the one that moves)."""
    logging.disable(logging.CRITICAL)  # a child process: quiet, never the test's own
    m = memory(where)
    i = 0
    journal = Path(journal)
    while True:
        start = time.monotonic()
        try:
            batch = [fix(f"W{name}-{i}", "t1", "1")]
            m.observe(ORIGIN, Observed(REQUEST, 422, failure(batch, server_version(journal))))
            error = None
        except StoreError as exc:
            error = str(exc)
        record = {"kind": "write", "start": start, "end": time.monotonic(), "error": error}
        _journal(journal, {**record, "fix": f"W{name}-{i}"})
        i += 1
        if pause_s:
            time.sleep(pause_s)


def reader(where: str, journal: Path) -> None:
    """Look the fixes up again and again, until killed; journal which ``t0`` fixes were served.

    It first confirms the origin with one response (a process serves nothing it has not)."""
    logging.disable(logging.CRITICAL)  # a child process: quiet, never the test's own
    m = memory(where)
    version = server_version(Path(journal))
    m.observe(ORIGIN, Observed(None, 200, {"success": True, **contract(version)}))
    while True:
        start = time.monotonic()
        try:
            served = [e.suggestion.type for e in m.lookup(ORIGIN, REQUEST).entries]
            error = None
        except StoreError as exc:
            served, error = [], str(exc)
        stale = [name for name in served if name.startswith("F")]
        record = {"kind": "lookup", "start": start, "end": time.monotonic(), "error": error}
        _journal(journal, {**record, "t0": len(stale)})


def mover(where: str, journal: Path, warm: bool = False) -> None:
    """The server commits the new version of ``t0`` and this agent observes it: the call that
    evicts every ``t0`` fix (unless a writer's call, stamped after the commit, did it first).

    ``warm``: the agent has read its memory before (a running agent); else the call includes
    loading the origin into a new process's replica."""
    logging.disable(logging.CRITICAL)  # a child process: quiet, never the test's own
    m = memory(where)
    if warm:
        m.stats(ORIGIN)
    moved(journal).touch()
    start, cpu = time.monotonic(), time.process_time()
    try:
        m.observe(ORIGIN, Observed(None, 200, {"success": True, **contract("2.0.0")}))
        error = None
    except StoreError as exc:
        error = str(exc)
    end, cpu = time.monotonic(), time.process_time() - cpu
    _journal(journal, {"kind": "move", "start": start, "end": end, "cpu": cpu, "error": error})
    m.close()


def stalled_mover(where: str, journal: Path, flag: Path) -> None:
    """A mover that observes the new version of ``t0`` first (before any other agent: the
    ``moved`` flag is the test's to set) and hangs between announcing its move and committing it
    (``StallBeforeRecord``), to be killed there."""
    logging.disable(logging.CRITICAL)  # a child process: quiet, never the test's own
    m = memory(where, StallBeforeRecord(open_store(where), flag))
    m.observe(ORIGIN, Observed(None, 200, {"success": True, **contract("2.0.0")}))


def records(journal: Path) -> list[dict[str, Any]]:
    if not journal.exists():
        return []
    out = []
    for line in journal.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a line cut by kill -9
            continue
    return out


def start(target: Any, *args: Any) -> Any:
    process = CONTEXT.Process(target=target, args=args, daemon=True)
    process.start()
    return process
