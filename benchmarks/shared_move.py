"""Writers' latency while one process moves a table that 5,000 shared fixes depend on, and one
writer is killed with SIGKILL mid-move (issue 38; the agent audit saw 30 s once: a zombie turn).

One shared memory (an SQLite file, or PostgreSQL from ``tests.support.postgres``) holds
``ENTRIES`` fixes on table ``catalog``. ``WRITERS`` processes each store one small fix on table
``side`` per call, in a tight loop, with the documented API (``FixMemory(..., store=...)`` and
``observe``). A mover process observes the answer that moves ``catalog``: it evicts the
``ENTRIES`` fixes. ``KILL_AFTER_S`` into the move, writer 0 gets SIGKILL and is left unreaped (a
zombie) until the end, the case that held every writer for the turn's 30 s TTL before.

Measured: every surviving writer's ``observe`` time for the calls started during the move (p50,
p99, max), the mover's time, give-ups (``StoreError``), and stale serves: lookups by writers after
the move committed that still return a fix on ``catalog``; and how long the mover held the
origin's turn (from first taking it to its commit: what writers wait behind).

``python -m benchmarks.shared_move [sqlite|postgres ...] [--entries N] [--runs N]``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from .common import markdown_table

ORIGIN = "https://contended.example"
DRAFT = {"sku": "s1"}
ENTRIES = 5_000
WRITERS = 4
KILL_AFTER_S = 0.3
TARGET_P99_S = 1.0
SPAWN = mp.get_context("spawn")


def body(fixes: list[dict[str, Any]], moved: bool = False) -> dict[str, Any]:
    return {
        "type": "urn:example:policy",
        "title": "rejected",
        "status": 422,
        "success": False,
        "recovery_feedback": {"suggestions": fixes},
        "table_versions": {"catalog": "2.0.0" if moved else "1.0.0", "side": "1.0.0"},
        "contract_seq": 1 if moved else 0,
        "contract_epoch": "ep1",
    }


def suggestion(name: str, table: str) -> dict[str, Any]:
    return {
        "type": name,
        "action": "add_field",
        "parameters": {"note": name},
        "cache_hint": "cacheable",
        "scope": DRAFT,
        "tables": [{"table": table, "version": "1.0.0", "keys": [name]}],
    }


def open_memory(where: str, entries: int, detection: str = "eager") -> Any:
    from invalidation_contracts.client import FixMemory, Limits

    limits = Limits(max_suggestions=max(entries, 64), max_entries_per_origin=10**6)
    if where.startswith("postgres"):
        from invalidation_contracts.client.stores import PostgresStore

        store = PostgresStore(where)
        return FixMemory("table", store=store, close_store=True, detection=detection, limits=limits)
    return FixMemory("table", store=where, detection=detection, limits=limits)


def observed(fixes: list[dict[str, Any]], moved: bool = False) -> Any:
    from invalidation_contracts.client.values import Observed

    return Observed(DRAFT, 422, body(fixes, moved))


def on_catalog(entries: Any) -> int:
    return sum(1 for e in entries if any(d.table == "catalog" for d in e.dependencies))


def writer(where: str, entries: int, idx: int, out: str, moved: str, stop: str) -> None:
    """Store one fix per call until ``stop`` exists; after ``moved`` exists, also look up."""
    from invalidation_contracts.client import StoreError

    log: dict[str, Any] = {"calls": [], "giveups": 0, "stale": 0, "served_after": 0}
    memory = open_memory(where, entries)
    i = 0
    try:
        while not os.path.exists(stop):
            i += 1
            fix = suggestion(f"w{idx}-{i}-{uuid.uuid4().hex[:6]}", "side")
            started = time.monotonic()
            try:
                memory.observe(ORIGIN, observed([fix]), operation="op")
            except StoreError:
                log["giveups"] += 1
            log["calls"].append((started, time.monotonic()))
            if os.path.exists(moved):
                found = memory.lookup(ORIGIN, DRAFT, operation="op").entries
                log["served_after"] += len(found)
                log["stale"] += on_catalog(found)
            if i % 20 == 0:
                Path(out).write_text(json.dumps(log))
    finally:
        Path(out).write_text(json.dumps(log))
        memory.close()


def mover(where: str, entries: int, out: str, moved: str) -> None:
    """Observe the answer that moves ``catalog`` (evicting its fixes); write the times."""
    from invalidation_contracts.client import transaction

    memory = open_memory(where, entries)
    taken: list[float] = []
    take = transaction.take_turn

    def timed(*args: Any, **kwargs: Any) -> Any:  # when the mover first holds the turn
        turn = yield from take(*args, **kwargs)
        taken.append(time.monotonic())
        return turn

    transaction.take_turn = timed  # type: ignore[assignment]
    rebased: list[bool] = []
    merge = getattr(transaction, "rebase", None)  # absent before the rebase (issue 38)
    if merge is not None:

        def counted(*args: Any) -> bool:
            rebased.append(merge(*args))
            return rebased[-1]

        transaction.rebase = counted  # type: ignore[assignment]
    Path(moved + ".started").write_text("1")
    result: dict[str, Any] = {"t0": time.monotonic()}
    obs = memory.observe(ORIGIN, observed([], moved=True), operation="op")
    result["evicted"] = sum(1 for e in obs.events if e.kind == "evicted")
    result["t1"] = time.monotonic()
    result["held"] = result["t1"] - taken[0] if taken else None
    result["rebased"] = sum(rebased) if merge is not None else None
    Path(moved).write_text("1")
    Path(out).write_text(json.dumps(result))
    memory.close()


def seed(where: str, entries: int) -> int:
    memory = open_memory(where, entries)
    for start in range(0, entries, 250):
        names = [f"c{start + k}" for k in range(min(250, entries - start))]
        memory.observe(ORIGIN, observed([suggestion(n, "catalog") for n in names]), operation="op")
    held = on_catalog(memory.entries(ORIGIN))
    memory.close()
    return held


def one_run(where: str, work: Path, entries: int, writers: int, kill: bool) -> dict[str, Any]:
    """One move with ``writers`` writers (one of them killed mid-move when ``kill``)."""
    seeded = seed(where, entries)
    moved, stop = str(work / "moved"), str(work / "stop")
    procs = [
        SPAWN.Process(
            target=writer, args=(where, entries, i, str(work / f"w{i}.json"), moved, stop)
        )
        for i in range(writers)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + 60  # the writers' imports and first writes (≥ 20 calls each)
    while time.monotonic() < deadline and not all(
        (work / f"w{i}.json").exists() for i in range(writers)
    ):
        time.sleep(0.05)
    time.sleep(2.0)  # the baseline: writers' calls in the 2 s before the move
    mv = SPAWN.Process(target=mover, args=(where, entries, str(work / "mover.json"), moved))
    mv.start()
    if kill:
        while not os.path.exists(moved + ".started"):
            time.sleep(0.005)
        time.sleep(KILL_AFTER_S)
        assert procs[0].pid is not None
        os.kill(procs[0].pid, signal.SIGKILL)  # not reaped until join: a zombie meanwhile
    mv.join(300)
    hung = mv.is_alive()
    time.sleep(1.0)  # writers go on after the commit (stale serves are counted here)
    Path(stop).write_text("1")
    for p in procs:
        p.join(60)
    if hung:
        mv.kill()
        mv.join(10)
    move = json.loads((work / "mover.json").read_text()) if not hung else {}
    logs = [
        json.loads((work / f"w{i}.json").read_text())
        for i in range(1 if kill else 0, writers)
        if (work / f"w{i}.json").exists()
    ]
    end = move.get("t1", float("inf"))
    during = sorted(
        t1 - t0 for log in logs for t0, t1 in log["calls"] if move.get("t0", 0) <= t0 <= end
    )
    start = move.get("t0", 0.0)
    before = sorted(t1 - t0 for log in logs for t0, t1 in log["calls"] if start - 2.0 <= t0 < start)
    final = open_memory(where, entries, "lazy")
    left = on_catalog(final.entries(ORIGIN))
    final.close()
    return {
        "seeded": seeded,
        "writers": writers,
        "killed": kill,
        "mover_s": (move["t1"] - move["t0"]) if move else None,
        "turn_held_s": move.get("held"),
        "rebased": move.get("rebased"),
        "evicted": move.get("evicted"),
        "calls": len(during),
        "p50_s": _pct(during, 0.5),
        "p99_s": _pct(during, 0.99),
        "max_s": during[-1] if during else None,
        "p99_before_s": _pct(before, 0.99),
        "giveups": sum(log["giveups"] for log in logs),
        "stale": sum(log["stale"] for log in logs),
        "served_after": sum(log["served_after"] for log in logs),
        "left": left,
        "load": os.getloadavg()[0],
    }


def _pct(values: list[float], q: float) -> float | None:
    return values[min(len(values) - 1, int(q * len(values)))] if values else None


def where_for(store: str, work: Path, cluster: Any) -> str:
    return cluster.database() if store == "postgres" else str(work / "memory.sqlite")


def run(stores: list[str], entries: int, runs: int) -> list[dict[str, Any]]:
    cluster = None
    if "postgres" in stores:
        from tests.support.postgres import PostgresCluster

        cluster = PostgresCluster.start()
    results = []
    try:
        for store in stores:
            for n in range(runs):
                with tempfile.TemporaryDirectory(prefix="move-") as tmp:
                    work = Path(tmp)
                    where = where_for(store, work, cluster)
                    result = one_run(where, work, entries, WRITERS, kill=True)
                    results.append({"store": store, "run": n + 1, **result})
                    print(json.dumps(results[-1]), flush=True)
    finally:
        if cluster is not None:
            cluster.stop()
    return results


def _ratio(during: float | None, before: float | None) -> str:
    return "—" if not during or not before else f"{during / before:.2f}×"


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:,.0f}"


def report(results: list[dict[str, Any]]) -> str:
    rows = [
        [
            r["store"],
            str(r["run"]),
            f"{r['seeded']:,}",
            f"{r['writers']} (1 killed)",
            _ms(r["mover_s"]),
            _ms(r["turn_held_s"]),
            str(r["calls"]),
            _ms(r["p50_s"]),
            f"**{_ms(r['p99_s'])}**",
            _ms(r["p99_before_s"]),
            _ratio(r["p99_s"], r["p99_before_s"]),
            _ms(r["max_s"]),
            str(r["giveups"]),
            f"{r['stale']} / {r['served_after']:,}",
            str(r["left"]),
            f"{r['load']:.1f}",
        ]
        for r in results
    ]
    worst = max((r["p99_s"] or 0.0) for r in results)
    return (
        markdown_table(
            [
                "store",
                "run",
                "fixes moved",
                "writers",
                "move (ms)",
                "turn held (ms)",
                "writer calls during the move",
                "p50 (ms)",
                "p99 (ms)",
                "p99 in the 2 s before (ms)",
                "p99 during / before",
                "max (ms)",
                "give-ups",
                "stale / served after commit",
                "left on the moved table",
                "load",
            ],
            rows,
        )
        + f"\n\nWorst writer p99 during a move: **{_ms(worst)} ms** (target ≤ "
        f"{TARGET_P99_S * 1000:,.0f} ms): {'met' if worst <= TARGET_P99_S else 'NOT met'}."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stores", nargs="*", default=["sqlite", "postgres"])
    parser.add_argument("--entries", type=int, default=ENTRIES)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(report(run(args.stores, args.entries, args.runs)))


if __name__ == "__main__":
    main()
