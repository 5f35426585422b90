"""Client cost on a real store: SQLite against in-memory, restamps at scale, a file shared.

Everything is driven through ``FixMemory``'s public calls (``observe``, ``answer``,
``lookup``), the code an agent runs, with cacheable L4 suggestions (one row each) learned from
422 responses of ``BATCH`` suggestions. Part of the client study (``client_cost.run``).

- *Stores*: at ``entries`` entries, ``lookup()`` for one draft and ``observe()`` of a steady 200
  (stamps unmoved) on ``SQLiteStore`` (its defaults: WAL, ``synchronous=FULL``) and on
  ``InMemoryStore``: the ratio is what the SQLite store costs a read (target ≤ 1.5×).
- *Restamp*: ``N`` entries on one table, then a touch (the stamp moves, the feed says no row
  changed): the ``observe`` that sees the move plus the ``answer`` that restamps all ``N``
  (checked), for N = 10³ … 10⁵; the log-log slope is the growth (target ≤ 1.05: linear). Means
  of ``rounds`` restamps, measured twice: as run, and with the heap that predates the restamps
  frozen out of the garbage collector's sight (``gc.freeze()``), the Ns taking turns.
- *Shared file*: ``PROCESSES`` processes open one SQLite file of ``entries`` entries and each
  makes ``LOOKUPS`` lookups; aggregate lookups/s against one process doing the same alone, and
  again with one of them storing a fix every ``WRITE_EVERY`` lookups (the others catch up through
  the journal).
"""

from __future__ import annotations

import gc
import multiprocessing
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from invalidation_contracts.client.events import Restamped
from invalidation_contracts.client.limits import Limits
from invalidation_contracts.client.memory import FixMemory
from invalidation_contracts.client.stores import InMemoryStore, SQLiteStore, Store
from invalidation_contracts.client.values import Answer, Observed

from .common import (
    Check,
    figure,
    loglog_axes,
    markdown_table,
    median,
    slope,
    time_calls,
    time_once,
)

ORIGIN = "https://api.example.test"
EPOCH = "bench-epoch"
BATCH = 100
COLD_TABLES = tuple(f"cold{i}" for i in range(10))
LIMITS = Limits(max_suggestions=BATCH, max_entries_per_origin=10**7)
TARGET_RATIO = 1.5
TARGET_SLOPE = 1.05
PROCESSES = 4
WRITE_EVERY = 50


@dataclass(frozen=True, slots=True)
class Size:
    entries: int
    restamp: tuple[int, ...]
    repeats: int
    lookups: int
    rounds: int
    """Restamps of each N (interleaved across N)."""


FULL = Size(entries=10**4, restamp=(10**3, 10**4, 10**5), repeats=7, lookups=20_000, rounds=5)
QUICK = Size(entries=200, restamp=(100, 200), repeats=2, lookups=200, rounds=2)


class Server:
    """The synthetic history the memory sees: table versions and a position."""

    def __init__(self) -> None:
        self.seq = 0
        self.versions = {name: "1.0.0" for name in ("hot", *COLD_TABLES)}
        self.serial = 0

    def contract(self) -> dict[str, Any]:
        return {
            "table_versions": dict(self.versions),
            "contract_seq": self.seq,
            "contract_epoch": EPOCH,
        }

    def failure(self, reads: Sequence[tuple[str, str]]) -> dict[str, Any]:
        suggestions = []
        for table, key in reads:
            self.serial += 1
            suggestions.append(
                {
                    "type": "USE_REQUIRED_VALUE",
                    "action": "add_field",
                    "parameters": {"value": key},
                    "cache_hint": "cacheable",
                    "table": table,
                    "scope": {"item": f"i{self.serial}"},
                    "tables": [{"table": table, "version": self.versions[table], "keys": [key]}],
                }
            )
        return {
            "type": "urn:invalidation-contracts:problem:policy-violation",
            "status": 422,
            "success": False,
            "recovery_feedback": {"suggestions": suggestions},
            **self.contract(),
        }

    def success(self) -> dict[str, Any]:
        return {"success": True, "result": {}, **self.contract()}

    def touch(self, table: str) -> dict[str, Any]:
        """Move ``table``'s version without changing a row; return the changes feed of it."""
        old = self.versions[table]
        self.seq += 1
        new = f"1.{self.seq}.0"
        self.versions[table] = new
        return {
            "contract_epoch": EPOCH,
            "since": self.seq - 1,
            "last_seq": self.seq,
            "tables": [
                {
                    "seq": self.seq,
                    "table": table,
                    "old_version": old,
                    "new_version": new,
                    "touch": True,
                }
            ],
        }


def learn(memory: FixMemory, server: Server, reads: Sequence[tuple[str, str]]) -> None:
    for start in range(0, len(reads), BATCH):
        memory.observe(ORIGIN, Observed(None, 422, server.failure(reads[start : start + BATCH])))


def spread(count: int) -> list[tuple[str, str]]:
    return [(COLD_TABLES[i % len(COLD_TABLES)], f"c{i}") for i in range(count)]


# -- SQLite against in-memory


def stores(size: Size, work: Path) -> dict[str, Any]:
    """Median seconds of a lookup and of a steady observe, per store, at ``size.entries``.

    Both memories are built first, then measured in turns, 200 calls of each at a time, so a
    change in the machine's load hits both alike.
    """
    made: dict[str, Callable[[], Store]] = {
        "in-memory": InMemoryStore,
        "sqlite": lambda: SQLiteStore(work / "stores.sqlite"),
    }
    draft = {"item": "i1"}
    runs: dict[str, tuple[FixMemory, dict[str, Any], list[float], list[float]]] = {}
    for name, open_store in made.items():
        server = Server()
        memory = FixMemory("row", store=open_store(), close_store=True, limits=LIMITS)
        learn(memory, server, spread(size.entries))
        success = server.success()
        memory.observe(ORIGIN, Observed(None, 200, success))
        if not memory.lookup(ORIGIN, draft).entries:
            raise RuntimeError(f"{name}: the lookup found nothing")
        runs[name] = (memory, success, [], [])
    for _ in range(size.repeats):
        for memory, success, lookups, observes in runs.values():
            lookups += time_calls(partial(memory.lookup, ORIGIN, draft), repeats=200)
            observes += time_calls(
                partial(memory.observe, ORIGIN, Observed(None, 200, success)), repeats=200
            )
    out: dict[str, Any] = {"entries": size.entries}
    for name, (memory, _, lookups, observes) in runs.items():
        memory.close()
        out[name] = {"lookup_s": median(lookups), "observe_s": median(observes)}
    out["lookup_ratio"] = out["sqlite"]["lookup_s"] / out["in-memory"]["lookup_s"]
    out["observe_ratio"] = out["sqlite"]["observe_s"] / out["in-memory"]["observe_s"]
    return out


# -- restamp at scale


def restamps(size: Size, work: Path) -> dict[str, Any]:
    """Mean seconds to restamp N entries (all on one table), per store, for each N.

    *As run*: each N in turn, ``rounds`` restamps, with Python's garbage collector as it comes.
    *Heap frozen*: then, with every memory built, ``gc.freeze()`` moves what lives before the
    restamps out of the collector's sight, and the Ns take turns round after round — the
    restamp's own cost, with the machine's load the same for each N.
    """
    out: dict[str, Any] = {}
    for name in ("in-memory", "sqlite"):
        memories = []
        as_run: dict[int, float] = {}
        for n in size.restamp:
            store: Store = (
                InMemoryStore()
                if name == "in-memory"
                else SQLiteStore(work / f"restamp-{n}.sqlite")
            )
            memory = FixMemory("row", store=store, close_store=True, limits=LIMITS)
            server = Server()
            learn(memory, server, [("hot", f"h{i}") for i in range(n)])
            _timed_touch(memory, server, n)  # warm: the first restamp also makes the wire form
            as_run[n] = statistics.fmean(
                _timed_touch(memory, server, n) for _ in range(size.rounds)
            )
            memories.append((n, memory, server))
        frozen: dict[int, list[float]] = {n: [] for n in size.restamp}
        gc.collect()
        gc.freeze()
        try:
            for _ in range(size.rounds):
                for n, memory, server in memories:
                    frozen[n].append(_timed_touch(memory, server, n))
        finally:
            gc.unfreeze()
        for _, memory, _ in memories:
            memory.close()
        points = [
            {"entries": n, "restamp_s": statistics.fmean(frozen[n]), "as_run_s": as_run[n]}
            for n in size.restamp
        ]
        ns = [p["entries"] for p in points]
        out[name] = {
            "points": points,
            "slope": slope(ns, [p["restamp_s"] for p in points]),
            "as_run_slope": slope(ns, [p["as_run_s"] for p in points]),
        }
    return out


def _timed_touch(memory: FixMemory, server: Server, n: int) -> float:
    feed = server.touch("hot")
    success = server.success()

    def restamp() -> int:
        (need,) = memory.observe(ORIGIN, Observed(None, 200, success)).needs
        return len(memory.answer(need, Answer(200, feed)).of(Restamped))

    seconds, restamped = time_once(restamp)
    if restamped != n:
        raise RuntimeError(f"expected {n} restamps, the memory made {restamped}")
    return seconds


# -- processes sharing one file


def shared_file(size: Size, work: Path) -> dict[str, Any]:
    """Aggregate lookups/s of 1 and of ``PROCESSES`` processes on one file, without and with a
    writer among them."""
    path = work / "shared.sqlite"
    with FixMemory("row", store=path, limits=LIMITS) as memory:
        learn(memory, Server(), spread(size.entries))
    runs = {
        "1 process": _lookups_per_second(path, 1, size.lookups, writer=False),
        f"{PROCESSES} processes": _lookups_per_second(path, PROCESSES, size.lookups, writer=False),
        f"{PROCESSES} processes, one writing": _lookups_per_second(
            path, PROCESSES, size.lookups, writer=True
        ),
    }
    base = runs["1 process"]["per_second"]
    for run in runs.values():
        run["ratio"] = run["per_second"] / base
    return runs


def _lookups_per_second(
    path: Path, processes: int, lookups: int, *, writer: bool
) -> dict[str, Any]:
    context = multiprocessing.get_context("fork")
    ready = context.Barrier(processes + 1)
    done = context.Queue()

    def agent(n: int) -> None:
        server = Server()
        server.serial = 10**9 + n * 10**6  # this agent's fixes have scopes of their own
        with FixMemory("row", store=SQLiteStore(path), close_store=True, limits=LIMITS) as memory:
            memory.entries(ORIGIN)  # the replica, loaded before the clock starts
            ready.wait(timeout=120)
            start = time.perf_counter()
            for i in range(lookups):
                memory.lookup(ORIGIN, {"item": f"i{1 + i % 1000}"})
                if writer and n == 0 and i % WRITE_EVERY == 0:
                    learn(memory, server, [("cold0", f"w{n}-{i}")])
            done.put((start, time.perf_counter()))

    workers = [context.Process(target=agent, args=(n,)) for n in range(processes)]
    for worker in workers:
        worker.start()
    ready.wait(timeout=120)
    spans = [done.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    if any(worker.exitcode != 0 for worker in workers):
        raise RuntimeError("a lookup process failed")
    wall = max(end for _, end in spans) - min(start for start, _ in spans)
    return {
        "processes": processes,
        "lookups": processes * lookups,
        "wall_s": wall,
        "per_second": processes * lookups / wall,
    }


def run(quick: bool) -> dict[str, Any]:
    size = QUICK if quick else FULL
    with tempfile.TemporaryDirectory(prefix="client-stores-") as tmp:
        work = Path(tmp)
        return {
            "stores": stores(size, work),
            "restamp": restamps(size, work),
            "shared": shared_file(size, work),
            "size": {
                "entries": size.entries,
                "restamp": list(size.restamp),
                "repeats": size.repeats,
                "lookups": size.lookups,
                "rounds": size.rounds,
            },
        }


def report(data: dict[str, Any], figures_dir: Path) -> tuple[str, list[Check], list[Path]]:
    """The stores' part of the client study: Markdown, checks and the restamp figure."""
    st, rs, sh = data["stores"], data["restamp"], data["shared"]
    n = st["entries"]
    checks = [
        Check(
            f"`lookup()` on SQLite ≤ {TARGET_RATIO}× in-memory at {n:,} entries",
            f"{st['lookup_ratio']:.2f}×",
            st["lookup_ratio"] <= TARGET_RATIO,
        ),
        Check(
            f"steady `observe()` on SQLite ≤ {TARGET_RATIO}× in-memory at {n:,} entries",
            f"{st['observe_ratio']:.2f}×",
            st["observe_ratio"] <= TARGET_RATIO,
        ),
    ]
    ends = rs["in-memory"]["points"]
    span = f"{ends[0]['entries']:,} → {ends[-1]['entries']:,}"
    for name in ("in-memory", "sqlite"):
        checks.append(
            Check(
                f"restamp cost linear in the entries restamped ({span}, {name}): slope ≤ "
                f"{TARGET_SLOPE}",
                f"log-log slope {rs[name]['slope']:.2f} (as run {rs[name]['as_run_slope']:.2f})",
                rs[name]["slope"] <= TARGET_SLOPE,
            )
        )
    stores_table = markdown_table(
        ["Store", "`lookup()` (µs)", "× in-memory", "steady `observe()` (µs)", "× in-memory"],
        [
            [
                name,
                f"{1e6 * st[name]['lookup_s']:.1f}",
                f"{st[name]['lookup_s'] / st['in-memory']['lookup_s']:.2f}",
                f"{1e6 * st[name]['observe_s']:.1f}",
                f"{st[name]['observe_s'] / st['in-memory']['observe_s']:.2f}",
            ]
            for name in ("in-memory", "sqlite")
        ],
    )
    restamp_table = markdown_table(
        [
            "Entries restamped",
            "in-memory (ms)",
            "µs per entry",
            "slope",
            "as run (ms)",
            "SQLite (ms)",
            "µs per entry",
            "slope",
            "as run (ms)",
        ],
        [
            [
                f"{a['entries']:,}",
                f"{1e3 * a['restamp_s']:,.1f}",
                f"{1e6 * a['restamp_s'] / a['entries']:.1f}",
                _step(rs["in-memory"]["points"], i),
                f"{1e3 * a['as_run_s']:,.1f}",
                f"{1e3 * b['restamp_s']:,.1f}",
                f"{1e6 * b['restamp_s'] / b['entries']:.1f}",
                _step(rs["sqlite"]["points"], i),
                f"{1e3 * b['as_run_s']:,.1f}",
            ]
            for i, (a, b) in enumerate(
                zip(rs["in-memory"]["points"], rs["sqlite"]["points"], strict=True)
            )
        ],
    )
    shared_table = markdown_table(
        ["Run", "Lookups", "Wall (s)", "Lookups/s (all processes)", "× 1 process"],
        [
            [
                name,
                f"{r['lookups']:,}",
                f"{r['wall_s']:.2f}",
                f"{r['per_second']:,.0f}",
                f"{r['ratio']:.2f}",
            ]
            for name, r in sh.items()
        ],
    )
    fig = figure(figures_dir / "client_restamp.png", lambda f: _draw(f, rs), size=(6.0, 4.2))
    md = "\n\n".join(
        [
            "### On a real store",
            (
                f"*Stores*: at {n:,} entries (learned through `observe`), medians of "
                f"{data['size']['repeats']} × 200 calls, the two memories built first and then "
                "measured in turns. SQLite is "
                "`SQLiteStore` with its defaults (WAL, `synchronous=FULL`). A lookup or a steady "
                "observe writes nothing; the SQLite memory reads `PRAGMA data_version` to know no "
                "other connection committed, and nothing else."
            ),
            stores_table,
            (
                "*Restamp*: N entries on one table; the table's stamp moves and the changes feed "
                "says no row changed (a touch), so all N are restamped (checked) and written in "
                "one batch — timed from the `observe` that sees the move to the `answer` that "
                f"restamps; means of {data['size']['rounds']} restamps. The main columns are "
                "measured with the heap that predates the restamps frozen out of the garbage "
                "collector's sight (`gc.freeze()`) and the Ns taking turns round after round: the "
                "restamp's own cost, under the same load for each N (*slope*: from the row "
                "above). *As run*: each N alone with the collector as it comes — its full passes "
                "scan a heap that grows with the memory and land on whichever restamp is running. "
                f"Log-log slopes: in-memory {rs['in-memory']['slope']:.2f} (as run "
                f"{rs['in-memory']['as_run_slope']:.2f}), SQLite {rs['sqlite']['slope']:.2f} (as "
                f"run {rs['sqlite']['as_run_slope']:.2f})."
            ),
            restamp_table,
            f"![restamp cost]({fig.relative_to(figures_dir.parent).as_posix()})",
            (
                f"*Shared file*: {PROCESSES} processes open one SQLite file of {n:,} entries, load "
                f"it, then each makes {data['size']['lookups']:,} lookups; lookups/s over all of "
                "them, against one process alone. In the last run one of them also stores a fix "
                f"every {WRITE_EVERY} lookups, so the others see the generation move and read the "
                f"new entries from the journal before they serve. `nproc` bounds the speed-up."
            ),
            shared_table,
        ]
    )
    return md, checks, [fig]


def _step(points: Sequence[dict[str, Any]], i: int) -> str:
    """The log-log slope from point ``i - 1`` to point ``i`` ("–" for the first)."""
    if i == 0:
        return "–"
    pair = points[i - 1 : i + 1]
    return f"{slope([p['entries'] for p in pair], [p['restamp_s'] for p in pair]):.2f}"


def _draw(fig: Any, rs: dict[str, Any]) -> None:
    ax = loglog_axes(fig, "entries restamped", "milliseconds (median)", "Restamp cost")
    for name, marker in (("in-memory", "o-"), ("sqlite", "s-")):
        points = rs[name]["points"]
        ax.plot(
            [p["entries"] for p in points],
            [1e3 * p["restamp_s"] for p in points],
            marker,
            label=f"{name} (slope {rs[name]['slope']:.2f})",
        )
    ax.legend(fontsize=8)
