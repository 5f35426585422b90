"""Property: the row strategy never serves a stale entry and never evicts a fresh one.

Random tables with few keys, random cached fixes reading random rows (or whole tables), and random
drift (row edits, removals, additions, multi-row reloads, touches). A brute-force oracle snapshots
what each fix read when it was stored and, after every drift, compares with the tables: once any
read row differs the fix is stale for good. Whenever the memory has just read the contract (after
a response and the needs it raised), its live entries must be exactly the fresh ones.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.client import FixMemory

KEYS = ["k0", "k1", "k2", "k3"]
TABLES = ["t0", "t1"]
MISSING = object()

rows = st.dictionaries(st.sampled_from(KEYS), st.integers(0, 2), max_size=len(KEYS))
reads = st.dictionaries(
    st.sampled_from(TABLES),
    st.one_of(st.none(), st.frozensets(st.sampled_from(KEYS), min_size=1)),
    min_size=1,
)
step = st.one_of(
    st.tuples(st.just("store"), reads),
    st.tuples(
        st.just("set"),
        st.sampled_from(TABLES),
        st.sampled_from(KEYS),
        st.one_of(st.none(), st.integers(0, 2)),
    ),
    st.tuples(st.just("reload"), st.sampled_from(TABLES), rows),
    st.tuples(st.just("touch"), st.sampled_from(TABLES)),
    st.tuples(st.just("observe"), st.booleans()),
    st.tuples(st.just("episode")),
)


class Oracle:
    """What each fix read when it was stored, and whether that has changed since."""

    def __init__(self) -> None:
        self.read: dict[str, dict[tuple[str, str | None], Any]] = {}
        self.stale: set[str] = set()

    def stored(self, entry_id: str, server, what: dict[str, frozenset[str] | None]) -> None:
        self.read[entry_id] = {
            (table, key): value
            for table, keys in what.items()
            for key, value in _snapshot(server, table, keys).items()
        }

    def drifted(self, server) -> None:
        for entry_id, seen in self.read.items():
            for (table, key), value in seen.items():
                now = (
                    dict(server.tables[table])
                    if key is None
                    else server.tables[table].get(key, MISSING)
                )
                if now != value:
                    self.stale.add(entry_id)

    @property
    def fresh(self) -> set[str]:
        return set(self.read) - self.stale


def _snapshot(server, table: str, keys: frozenset[str] | None) -> dict[str | None, Any]:
    if keys is None:
        return {None: dict(server.tables[table])}
    return {key: server.tables[table].get(key, MISSING) for key in keys}


@settings(max_examples=150, deadline=None)
@given(
    initial=st.fixed_dictionaries({table: rows for table in TABLES}),
    steps=st.lists(step, min_size=1, max_size=12),
    detection=st.sampled_from(["eager", "resync"]),
)
def test_row_strategy_evicts_exactly_the_entries_whose_rows_changed(
    initial, steps, detection, fake_origin, driver_class
):
    server = fake_origin(initial)
    memory = FixMemory("row", detection)
    drive = driver_class(memory, server)
    oracle = Oracle()
    made = 0
    for action, *args in steps:
        if action == "store":
            (what,) = args
            made += 1
            fix = server.fix(
                f"F{made}", {"n": made}, scope={}, reads={t: what[t] for t in sorted(what)}
            )
            events = drive.fail(fix)
            oracle.stored(next(e.entry_id for e in events if e.kind == "stored"), server, what)
        elif action in ("set", "reload", "touch"):
            if action == "set":
                server.update(*args)
            elif action == "reload":
                server.reload(*args)
            else:
                server.touch(*args)
            oracle.drifted(server)
            continue
        elif action == "observe":
            drive.conditional = args[0]
            drive.ok()
        else:
            drive.begin()
            if detection != "resync":
                continue

        live = {entry.id for entry in memory.entries(server.url)}
        assert live == oracle.fresh, (
            f"stale kept: {live & oracle.stale}, fresh evicted: {oracle.fresh - live}"
        )
        assert {entry.id for entry in memory.lookup(server.url, {}).entries} <= oracle.fresh
