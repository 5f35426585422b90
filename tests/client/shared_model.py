"""Several agents sharing one memory store, and a brute-force model of what they must agree on.

Each agent (a process, a thread, or a second memory in the same process) runs a script of calls
against one origin whose history is fixed in advance: a table ``t0`` with four rows, drifting one
row (or touching the table) per step. The agents move the server along the history through a
shared counter, learn fixes, observe responses (fulfilling the memory's needs from the history),
evict entries and look fixes up, recording every event with a global timestamp taken before and
after each call.

The model: every stored id is unique; at the end, the live entries are exactly the stored ones
minus the evicted ones, and every evicted one is a tombstone (no entry lost, none both live and
evicted); no lookup serves an entry whose eviction had completed before the lookup began, nor an
entry at an older stamp than a restamp completed before it began (no stale serve).
"""

from __future__ import annotations

import json
import multiprocessing
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from invalidation_contracts.client import FixMemory, Observation, Store
from invalidation_contracts.client.events import Evicted, Restamped, Served, Stored
from invalidation_contracts.client.limits import Limits
from invalidation_contracts.client.shared.index import OriginIndex
from invalidation_contracts.client.values import Answer, Observed

ORIGIN = "https://shared.test"
EPOCH = "shared-epoch"
KEYS = ("k0", "k1", "k2", "k3")

SCOPES = 2
#: One call of an agent's script (lookups weighted up: they are where a stale serve would show).
lookup = st.tuples(st.just("lookup"), st.integers(0, SCOPES - 1))
call = st.one_of(
    st.tuples(st.just("learn"), st.integers(0, 11)),
    st.tuples(st.just("observe")),
    st.tuples(st.just("drift")),
    st.tuples(st.just("evict"), st.integers(0, 7)),
    lookup,
    lookup,
    lookup,
)
#: The server's history: each step changes one row (a key) or touches the table (None).
history = st.lists(st.one_of(st.none(), st.sampled_from(KEYS)), min_size=1, max_size=6)


def version(seq: int) -> str:
    return f"1.0.{seq}"


def contract(seq: int) -> dict[str, Any]:
    return {"table_versions": {"t0": version(seq)}, "contract_seq": seq, "contract_epoch": EPOCH}


def fix(i: int, seq: int) -> dict[str, Any]:
    key = KEYS[i % len(KEYS)]
    return {
        "type": f"F{i % 3}",
        "parameters": {"value": f"v{i}"},
        "action": "add_field",
        "cache_hint": "cacheable",
        "scope": {"item": f"s{i % SCOPES}"},
        "tables": [{"table": "t0", "version": version(seq), "keys": [key]}],
    }


def feed(steps: Sequence[str | None], since: int, upto: int) -> dict[str, Any]:
    """The changes feed of the history from ``since`` (exclusive) to ``upto``."""
    rows, tables = [], []
    for seq in range(since + 1, upto + 1):
        key = steps[seq - 1]
        old, new = version(seq - 1), version(seq)
        if key is not None:
            rows.append(
                {
                    "seq": seq,
                    "table": "t0",
                    "key": key,
                    "op": "changed",
                    "old_version": old,
                    "new_version": new,
                }
            )
        tables.append(
            {
                "seq": seq,
                "table": "t0",
                "old_version": old,
                "new_version": new,
                "touch": key is None,
            }
        )
    return {
        "contract_epoch": EPOCH,
        "since": since,
        "last_seq": upto,
        "rows": rows,
        "tables": tables,
    }


class Clock:
    """A global order of events across agents: one counter in shared memory."""

    def __init__(self, context: Any = multiprocessing) -> None:
        self.value = context.Value("q", 0)
        self.seq = context.Value("q", 0)

    def tick(self) -> int:
        with self.value.get_lock():
            self.value.value += 1
            return int(self.value.value)


@dataclass
class Agent:
    """One agent: its memory, the shared history and clock, and where it writes its record."""

    memory: FixMemory
    steps: Sequence[str | None]
    clock: Clock
    out: Path

    def run(self, script: Sequence[tuple[Any, ...]]) -> None:
        records: list[dict[str, Any]] = []
        for op in script:
            start = self.clock.tick()
            events = self.step(op)
            end = self.clock.tick()
            records.extend({"start": start, "end": end, **e} for e in events)
        self.out.write_text(json.dumps(records))

    def step(self, op: tuple[Any, ...]) -> list[dict[str, Any]]:
        kind = op[0]
        memory = self.memory
        if kind == "drift":
            with self.clock.seq.get_lock():
                if self.clock.seq.value < len(self.steps):
                    self.clock.seq.value += 1
            return []
        if kind == "learn":
            seq = self.clock.seq.value
            body = {
                "type": "urn:x:policy",
                "title": "t",
                "status": 422,
                "success": False,
                "recovery_feedback": {"suggestions": [fix(op[1], seq)]},
                **contract(seq),
            }
            return self.settle(memory.observe(ORIGIN, Observed(None, 422, body)))
        if kind == "observe":
            seq = self.clock.seq.value
            return self.settle(
                memory.observe(ORIGIN, Observed(None, 200, {"success": True, **contract(seq)}))
            )
        if kind == "evict":
            live = memory.entries(ORIGIN)
            if not live:
                return []
            target = live[op[1] % len(live)].id
            return _records(memory.evict(ORIGIN, entry_ids=[target]).events)
        draft = {"item": f"s{op[1]}"}
        found = memory.lookup(ORIGIN, draft)
        served = [
            {"event": "served", "id": e.id, "version": e.dependencies[0].version}
            for e in found.entries
        ]
        return served + _records(e for e in found.events if not isinstance(e, Served))

    def settle(self, obs: Observation) -> list[dict[str, Any]]:
        events = _records(obs.events)
        needs = list(obs.needs)
        for _ in range(4):
            follow = []
            for need in needs:
                upto = self.clock.seq.value
                since = getattr(need, "since", 0)
                answer = self.memory.answer(need, Answer(200, feed(self.steps, since, upto)))
                events += _records(answer.events)
                follow += answer.needs
            needs = follow
        return events


def _records(events: Any) -> list[dict[str, Any]]:
    out = []
    for event in events:
        if isinstance(event, Stored):
            out.append({"event": "stored", "id": event.entry_id})
        elif isinstance(event, Evicted):
            out.append({"event": "evicted", "id": event.entry_id, "reason": event.reason.value})
        elif isinstance(event, Restamped):
            out.append(
                {
                    "event": "restamped",
                    "id": event.entry_id,
                    "version": event.versions.get("t0", (None, None))[1],
                }
            )
    return out


def memory_limits() -> Limits:
    return Limits()


def run_processes(
    open_store: Callable[[], Store],
    scripts: Sequence[Sequence[tuple[Any, ...]]],
    steps: Sequence[str | None],
    work: Path,
) -> list[dict[str, Any]]:
    """Run each script in its own process (fork), all at once; return every record."""
    context = multiprocessing.get_context("fork")
    clock = Clock(context)
    barrier = context.Barrier(len(scripts))
    outs = [work / f"agent{n}.json" for n in range(len(scripts))]

    def agent(n: int) -> None:
        store = open_store()
        with FixMemory("row", store=store, close_store=True) as memory:
            barrier.wait(timeout=60)
            Agent(memory, steps, clock, outs[n]).run(scripts[n])

    workers = [context.Process(target=agent, args=(n,)) for n in range(len(scripts))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    codes = [worker.exitcode for worker in workers]
    assert codes == [0] * len(scripts), f"an agent failed: exit codes {codes}"
    return [record for out in outs for record in json.loads(out.read_text())]


def run_threads(
    memories: Sequence[FixMemory],
    scripts: Sequence[Sequence[tuple[Any, ...]]],
    steps: Sequence[str | None],
    work: Path,
) -> list[dict[str, Any]]:
    """Run each script in its own thread, on ``memories[n % len(memories)]``."""
    clock = Clock()
    barrier = threading.Barrier(len(scripts))
    outs = [work / f"agent{n}.json" for n in range(len(scripts))]
    failures: list[BaseException] = []

    def agent(n: int) -> None:
        try:
            barrier.wait(timeout=60)
            Agent(memories[n % len(memories)], steps, clock, outs[n]).run(scripts[n])
        except BaseException as exc:  # reported by the test below
            failures.append(exc)

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(len(scripts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not failures, failures
    return [record for out in outs for record in json.loads(out.read_text())]


def check_against_the_model(records: list[dict[str, Any]], reader: FixMemory) -> None:
    """Every claim of the module docstring, on the agents' records and a fresh reader."""
    stored = [r["id"] for r in records if r["event"] == "stored"]
    evicted = [r for r in records if r["event"] == "evicted"]
    assert len(stored) == len(set(stored)), f"an id was issued twice: {sorted(stored)}"
    assert len(evicted) == len({r["id"] for r in evicted}), "an entry was evicted twice"

    live = {entry.id for entry in reader.entries(ORIGIN)}
    tombstones = {t.entry.id for t in reader.tombstones(ORIGIN)}
    assert not live & tombstones, f"live and evicted at once: {live & tombstones}"
    assert live == set(stored) - {r["id"] for r in evicted}, (
        "the live entries differ from the model"
    )
    assert tombstones == {r["id"] for r in evicted}, "an eviction left no tombstone"

    for lookup in (r for r in records if r["event"] == "served"):
        for earlier in records:
            if earlier["id"] != lookup["id"] or earlier["end"] >= lookup["start"]:
                continue
            assert earlier["event"] != "evicted", f"served {lookup['id']} after its eviction"
            if earlier["event"] == "restamped":
                assert _minor(lookup["version"]) >= _minor(earlier["version"]), (
                    f"served {lookup['id']} at {lookup['version']} after a restamp to "
                    f"{earlier['version']}"
                )

    entries = reader.entries(ORIGIN)
    index = OriginIndex(entries)
    for n in range(SCOPES):
        draft = {"item": f"s{n}"}
        assert [e.id for e in index.matching(draft)] == [e.id for e in entries if e.matches(draft)]


def _minor(version: str) -> int:
    return int(version.rsplit(".", 1)[1])
