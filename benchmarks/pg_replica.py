"""The PostgreSQL fleet memory's lookups: a replica that LISTEN/NOTIFY keeps current (issue 22).

``lookup()`` for one draft at ``entries`` entries, on three memories built alike: in-memory
(the baseline), PostgreSQL with its LISTEN connection (``PostgresStore(url)``, the default since
issue 40: the replica serves while no notification came), and PostgreSQL without it
(``listen=False``: one round trip, the origin's generation, before every lookup). Measured in
turns, ``CALLS`` calls of each at a time, so a change in the machine's load hits all alike;
target: replica / in-memory ≤ 1.5×.

Then the interval the replica trusts: another connection commits a write, and the time until the
reader's ``version()`` token moves (the notification's delivery, read by the listening thread),
``writes`` times.
"""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path
from typing import Any

from .common import Check, StudyResult, markdown_table, median, time_calls

NAME = "pg_replica"
TITLE = "PostgreSQL fleet memory: lookups from a NOTIFY-invalidated replica"
TARGET_RATIO = 1.5
CALLS = 200


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    from tests.support.postgres import PostgresCluster

    entries, repeats, writes = (200, 2, 20) if quick else (10_000, 7, 200)
    cluster = PostgresCluster.start()
    try:
        data = {
            "lookups": lookups(cluster, entries, repeats),
            "delivery": delivery(cluster.database(), writes),
        }
    finally:
        cluster.stop()
    return _report(data)


def lookups(cluster: Any, entries: int, repeats: int) -> dict[str, Any]:
    from invalidation_contracts.client import FixMemory, InMemoryStore
    from invalidation_contracts.client.stores import PostgresStore
    from invalidation_contracts.client.values import Observed

    from .client_stores import LIMITS, ORIGIN, Server, learn, spread

    made = {
        "in-memory": InMemoryStore,
        "postgres, replica (LISTEN)": lambda: PostgresStore(cluster.database()),  # the default
        "postgres, round trip": lambda: PostgresStore(cluster.database(), listen=False),
    }
    draft = {"item": "i1"}
    runs: dict[str, tuple[Any, list[float]]] = {}
    for name, open_store in made.items():
        server = Server()
        memory = FixMemory("row", store=open_store(), close_store=True, limits=LIMITS)
        learn(memory, server, spread(entries))
        memory.observe(ORIGIN, Observed(None, 200, server.success()))
        listener = getattr(memory.store, "listener", None)
        if listener is not None and not listener.listening.wait(20):
            raise RuntimeError("the LISTEN connection never came up")
        for _ in range(3):
            if not memory.lookup(ORIGIN, draft).entries:
                raise RuntimeError(f"{name}: the lookup found nothing")
        runs[name] = (memory, [])
    for _ in range(repeats):
        for memory, times in runs.values():
            times += time_calls(partial(memory.lookup, ORIGIN, draft), repeats=CALLS)
    base = median(runs["in-memory"][1])
    out: dict[str, Any] = {"entries": entries, "calls": repeats * CALLS, "stores": {}}
    for name, (memory, times) in runs.items():
        memory.close()
        out["stores"][name] = {"lookup_s": median(times), "ratio": median(times) / base}
    return out


def delivery(url: str, writes: int) -> dict[str, Any]:
    """Seconds from a commit's return (another connection) to the reader's token moving."""
    from invalidation_contracts.client.stores import PostgresStore

    reader, writer = (
        PostgresStore(url, listen=True),
        PostgresStore(url + "&application_name=bench-writer", listen=False),
    )
    try:
        assert reader.listener is not None and reader.listener.listening.wait(20)
        waits = []
        for n in range(writes):
            before = reader.version()
            while before is None:
                time.sleep(0.001)
                before = reader.version()
            writer.put(("bench",), f"k{n}", {"n": n})
            done = time.perf_counter()
            deadline = done + 5
            while reader.version() == before:
                if time.perf_counter() > deadline:
                    raise RuntimeError("a commit never reached the listener")
                time.sleep(0)
            waits.append(time.perf_counter() - done)
            time.sleep(0.005)
    finally:
        reader.close()
        writer.close()
    waits.sort()
    return {
        "writes": writes,
        "p50_ms": 1000 * median(waits),
        "p99_ms": 1000 * waits[min(len(waits) - 1, int(0.99 * len(waits)))],
        "max_ms": 1000 * waits[-1],
    }


def _report(data: dict[str, Any]) -> StudyResult:
    lk, dl = data["lookups"], data["delivery"]
    rows = [
        [name, f"{1e6 * s['lookup_s']:.1f}", f"**{s['ratio']:.2f}×**"]
        for name, s in lk["stores"].items()
    ]
    replica = lk["stores"]["postgres, replica (LISTEN)"]["ratio"]
    checks = [
        Check(
            f"`lookup()` on PostgreSQL with its replica ≤ {TARGET_RATIO}× in-memory at "
            f"{lk['entries']:,} entries",
            f"{replica:.2f}×",
            replica <= TARGET_RATIO,
        )
    ]
    md = "\n\n".join(
        [
            (
                f"`lookup()` for one draft at {lk['entries']:,} entries (row strategy), "
                f"{lk['calls']} calls per store taken in turns of {CALLS}; medians, µs. "
                "`PostgresStore(url)` (the default) keeps a LISTEN connection "
                "(`client/stores/pg_listen.py`); every write batch notifies in its own "
                "transaction, so the memory's replica serves while no notification came, and asks "
                "the database (one round trip) while the connection is down. With "
                "`listen=False` (*round trip*) every lookup reads the origin's generation first."
            ),
            markdown_table(["Store", "lookup (µs)", "× in-memory"], rows),
            (
                f"**What the replica trusts.** {dl['writes']} commits by another connection: "
                "from the commit's return to the reader's token moving (the notification "
                f"delivered and read): p50 {dl['p50_ms']:.2f} ms, p99 {dl['p99_ms']:.2f} ms, "
                f"max {dl['max_ms']:.2f} ms. Within that interval another process may serve "
                "what a commit just evicted; a process's own writes move its token at once."
            ),
        ]
    )
    return StudyResult(NAME, TITLE, md, checks, [], json.loads(json.dumps(data)))
