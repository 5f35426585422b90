"""A large eviction recorded once: one small record every reader applies, not one write per entry.

A version move, a resync or an operator's eviction can take thousands of entries out of service in
one call. Written eagerly that is a delete and a tombstone per entry — a batch of 10⁴ rows that
loses every race to writers storing small fixes beside it (issue 22, item 8). So a call that
evicts at least ``RECORD_MIN`` committed entries writes them as one ``EvictionRecord`` instead: the
evicted entries' serials as runs (``[[1, 5000]]`` for 5,000 consecutive entries), with the reason,
detail and first tombstone sequence of each group. The entries stay in the store, dead:

- every reader applies a record before it serves — a replica removes the ids a new record names
  (``apply``), a load leaves them out (``covered``);
- the record *is* their tombstones: ``tombstones`` rebuilds them from the record and the entries'
  stored rows, exactly as the eager rewrite would have written them;
- bounded history (``client.retention``) sweeps them lazily: once a tombstone's sequence falls
  below the origin's floor, a later commit deletes its entry row (``SWEEP_MAX`` a commit,
  ``sweep``), and the record itself once nothing of it is left.

Pure logic: ``client.shared.layout`` persists and fetches records, stores know nothing of them. The
record names exact ids (as runs), not a rule such as "every entry of ``t0`` not at version 2":
versions are opaque and may come back, and an entry restamped after the record could then match a
rule it did not match when the record was written.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..entries import EvictionReason, MemoryEntry, Tombstone, serial_of
from .index import OriginIndex

#: A call evicting at least this many committed entries writes a record instead of rewriting them.
RECORD_MIN = 64
#: Entry rows of swept tombstones one commit deletes at most (the rest wait for later commits).
SWEEP_MAX = 256
#: Runs and groups a record read from a store may hold (a record is data another process wrote).
MAX_RUNS = 1_000_000


@dataclass(frozen=True, slots=True)
class Group:
    """Entries evicted for one reason in one call, with consecutive tombstone sequences."""

    reason: EvictionReason
    detail: str
    first: int
    """The tombstone sequence of the group's first entry; the next ones follow on."""
    runs: tuple[tuple[int, int], ...]
    """Serials ``[low, high]`` in eviction order (each run ascending)."""

    @property
    def size(self) -> int:
        return sum(high - low + 1 for low, high in self.runs)

    def serials(self) -> Iterator[int]:
        for low, high in self.runs:
            yield from range(low, high + 1)


@dataclass(frozen=True, slots=True)
class EvictionRecord:
    """One call's large eviction, as committed at ``generation``."""

    generation: int
    episode: int | None
    evicted_at: float
    groups: tuple[Group, ...]
    swept: int = 0
    """How many of its entries (in sequence order) have had their rows deleted."""

    @property
    def size(self) -> int:
        return sum(group.size for group in self.groups)

    @property
    def last_sequence(self) -> int:
        last = self.groups[-1]
        return last.first + last.size - 1

    def evicted(self) -> Iterator[tuple[int, str, Group]]:
        """``(tombstone sequence, entry id, group)`` of every entry it evicted, in order."""
        for group in self.groups:
            for offset, serial in enumerate(group.serials()):
                yield group.first + offset, f"e{serial}", group

    def ids(self) -> list[str]:
        return [entry_id for _, entry_id, _ in self.evicted()]

    def to_dict(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "episode": self.episode,
            "evicted_at": self.evicted_at,
            "groups": [
                {
                    "reason": g.reason.value,
                    "detail": g.detail,
                    "first": g.first,
                    "runs": [list(run) for run in g.runs],
                }
                for g in self.groups
            ],
            "swept": self.swept,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvictionRecord:
        """A record as stored; ``ValueError`` (or ``KeyError``/``TypeError``) if malformed."""
        groups = []
        runs_seen = 0
        for g in data["groups"]:
            runs = tuple((_int(low), _int(high)) for low, high in g["runs"])
            runs_seen += len(runs)
            if runs_seen > MAX_RUNS or any(low < 1 or high < low for low, high in runs):
                raise ValueError("an eviction record with invalid or too many runs")
            reason = EvictionReason(g["reason"])
            groups.append(Group(reason, str(g["detail"]), _int(g["first"]), runs))
        if not groups:
            raise ValueError("an eviction record without groups")
        episode = data.get("episode")
        return cls(
            _int(data["generation"]),
            _int(episode) if episode is not None else None,
            float(data["evicted_at"]),
            tuple(groups),
            _int(data.get("swept", 0)),
        )


def record_of(
    removed: Mapping[str, Tombstone],
    committed: OriginIndex,
    generation: int,
    *,
    minimum: int = RECORD_MIN,
) -> tuple[EvictionRecord | None, dict[str, Tombstone]]:
    """Split a call's evictions into a record and the tombstones still written one by one.

    An eviction goes into the record when its entry is committed as it was evicted (its stored
    row is the tombstone's entry) and its id is the memory's own (``e<serial>``); the others —
    entries stored or restamped by the same call — are written eagerly. ``generation``: the one
    the call commits (the record's key). No record under ``minimum`` recordable evictions.
    """
    recordable: list[Tombstone] = []
    eager: dict[str, Tombstone] = {}
    for entry_id, tomb in removed.items():
        serial = serial_of(entry_id)
        if serial is not None and committed.entries.get(entry_id) is tomb.entry:
            recordable.append(tomb)
        else:
            eager[entry_id] = tomb
    if len(recordable) < minimum:
        return None, dict(removed)
    groups: list[Group] = []
    runs: list[list[int]] = []
    head: Tombstone | None = None
    previous: Tombstone | None = None
    for tomb in sorted(recordable, key=lambda t: t.sequence):
        serial = tomb.entry.serial
        same = (
            previous is not None
            and head is not None
            and tomb.sequence == previous.sequence + 1
            and (tomb.reason, tomb.detail) == (head.reason, head.detail)
        )
        if not same:
            if head is not None:
                groups.append(_group(head, runs))
            head, runs = tomb, [[serial, serial]]
        elif serial == runs[-1][1] + 1:
            runs[-1][1] = serial
        else:
            runs.append([serial, serial])
        previous = tomb
    assert head is not None
    groups.append(_group(head, runs))
    first = recordable[0]
    return EvictionRecord(generation, first.episode, first.evicted_at, tuple(groups)), eager


def _group(head: Tombstone, runs: list[list[int]]) -> Group:
    return Group(head.reason, head.detail, head.sequence, tuple((lo, hi) for lo, hi in runs))


def covered(records: Iterable[EvictionRecord]) -> frozenset[str]:
    """The ids every record evicted: a reader leaves their stored rows out of service."""
    return frozenset(entry_id for record in records for entry_id in record.ids())


def apply(index: OriginIndex, record: EvictionRecord) -> OriginIndex:
    """A replica's index with the entries a record evicted taken out (the index returned may be
    a new one: ``OriginIndex.without``)."""
    return index.without(record.ids())


def tombstones(
    records: Iterable[EvictionRecord], rows: Mapping[str, MemoryEntry], floor: int
) -> list[Tombstone]:
    """The tombstones records stand for: every evicted entry at or above ``floor`` (the
    retention floor) whose row is still stored, as the eager rewrite would have written it."""
    found = []
    for record in records:
        for sequence, entry_id, group in record.evicted():
            entry = rows.get(entry_id)
            if sequence >= floor and entry is not None:
                found.append(
                    Tombstone(
                        entry,
                        group.reason,
                        group.detail,
                        record.episode,
                        record.evicted_at,
                        sequence,
                    )
                )
    return found


def kept_ids(records: Iterable[EvictionRecord], floor: int) -> list[str]:
    """The ids whose rows hold a tombstone still in the history (sequence at or above ``floor``)."""
    return [
        entry_id
        for record in records
        for sequence, entry_id, _ in record.evicted()
        if sequence >= floor
    ]


@dataclass(frozen=True, slots=True)
class Sweep:
    """What one commit deletes of the records' dead rows, and the records it leaves."""

    deleted_rows: tuple[str, ...]
    """Entry ids whose rows it deletes."""
    updated: tuple[EvictionRecord, ...]
    """Records written back with more ``swept``."""
    dropped: tuple[int, ...]
    """Generations of records it deletes (every row swept, every tombstone below the floor)."""

    @property
    def touched(self) -> tuple[int, ...]:
        return tuple(r.generation for r in self.updated) + self.dropped


def sweep(records: Sequence[EvictionRecord], floor: int, budget: int = SWEEP_MAX) -> Sweep:
    """Delete up to ``budget`` rows of entries whose tombstones fell below ``floor``, oldest
    record first; drop records wholly below it and swept."""
    rows: list[str] = []
    updated: list[EvictionRecord] = []
    dropped: list[int] = []
    for record in sorted(records, key=lambda r: r.generation):
        if len(rows) >= budget:
            break
        position = 0
        swept = record.swept
        for sequence, entry_id, _ in record.evicted():
            if sequence >= floor or len(rows) >= budget:
                break
            if position >= record.swept:
                rows.append(entry_id)
                swept = position + 1
            position += 1
        if swept >= record.size and record.last_sequence < floor:
            dropped.append(record.generation)
        elif swept != record.swept:
            updated.append(replace(record, swept=swept))
    return Sweep(tuple(rows), tuple(updated), tuple(dropped))


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value
