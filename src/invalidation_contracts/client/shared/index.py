"""The live entries of one origin and the indexes a change is answered from.

Observing a change to table ``t`` or row ``t:k`` looks up exactly the entries that touch it, so its
cost is proportional to those entries, not to the size of the memory; finding the entries relevant
to a draft looks up the entries keyed on the draft's values the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ...protocol.canonical import canonical_json
from ...protocol.models import RuleTriple
from ..entries import MemoryEntry, MemoryKey

#: An entry's operation, its first scope field and the canonical JSON of that field's value.
ScopeToken = tuple[str, str, bytes]


#: Ids in the order they were added (a dict used as an ordered set).
Bucket = dict[str, None]


class OriginIndex:
    """Entries by id, key, table, row, rule, type, and the reverse of ``derived_from``.

    Entries are added in serial order (ids are issued in order, and every writer adds them so),
    and each bucket keeps the order its ids were added in, so a bucket is read in store order
    without sorting it.
    """

    def __init__(self, entries: Iterable[MemoryEntry] = ()) -> None:
        self.entries: dict[str, MemoryEntry] = {}
        self._by_key: dict[MemoryKey, str] = {}
        self._by_table: dict[str, Bucket] = {}
        self._by_row: dict[tuple[str, str], Bucket] = {}
        self._whole: dict[str, Bucket] = {}
        self._key_set: dict[str, Bucket] = {}
        self._by_rule: dict[RuleTriple, Bucket] = {}
        self._by_type: dict[str, Bucket] = {}
        self._rule_dependent: Bucket = {}
        self._consumers: dict[str, Bucket] = {}
        self._by_scope: dict[ScopeToken, Bucket] = {}
        self._unscoped: dict[str, Bucket] = {}
        self.row_keys = 0
        """Row keys the live entries' dependencies name, all together (``Limits.
        max_keys_per_origin``)."""
        for entry in sorted(entries, key=lambda e: e.serial):
            self.add(entry)

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self.entries

    def __iter__(self) -> Iterator[MemoryEntry]:
        """Live entries in the order they were stored."""
        return iter(self.entries.values())

    def add(self, entry: MemoryEntry) -> None:
        eid = entry.id
        self.entries[eid] = entry
        self._by_key[entry.key] = eid
        self._by_type.setdefault(entry.type, {})[eid] = None
        token = _scope_token(entry.key)
        if token is None:
            self._unscoped.setdefault(entry.operation, {})[eid] = None
        else:
            self._by_scope.setdefault(token, {})[eid] = None
        self.row_keys += entry.row_keys
        for dep in entry.dependencies:
            self._by_table.setdefault(dep.table, {})[eid] = None
            if dep.keys is None:
                self._whole.setdefault(dep.table, {})[eid] = None
            if dep.membership:
                self._key_set.setdefault(dep.table, {})[eid] = None
            for key in dep.keys or ():
                self._by_row.setdefault((dep.table, key), {})[eid] = None
        if entry.rules:
            self._rule_dependent[eid] = None
            for rule in entry.rules:
                self._by_rule.setdefault(rule, {})[eid] = None
        for parent in entry.derived_from:
            self._consumers.setdefault(parent, {})[eid] = None

    def replace(self, entry: MemoryEntry) -> None:
        """Swap in a restamped copy (same id, same dependencies' tables and keys)."""
        self.entries[entry.id] = entry

    def remove(self, entry_id: str) -> tuple[MemoryEntry, list[MemoryEntry]]:
        """Drop an entry; return it and its live consumers (entries derived from it)."""
        entry = self.entries.pop(entry_id)
        self.row_keys -= entry.row_keys
        if self._by_key.get(entry.key) == entry_id:
            del self._by_key[entry.key]
        _discard(self._by_type, entry.type, entry_id)
        token = _scope_token(entry.key)
        if token is None:
            _discard(self._unscoped, entry.operation, entry_id)
        else:
            _discard(self._by_scope, token, entry_id)
        for dep in entry.dependencies:
            _discard(self._by_table, dep.table, entry_id)
            if dep.keys is None:
                _discard(self._whole, dep.table, entry_id)
            if dep.membership:
                _discard(self._key_set, dep.table, entry_id)
            for key in dep.keys or ():
                _discard(self._by_row, (dep.table, key), entry_id)
        self._rule_dependent.pop(entry_id, None)
        for rule in entry.rules:
            _discard(self._by_rule, rule, entry_id)
        for parent in entry.derived_from:
            _discard(self._consumers, parent, entry_id)
        bucket = self._consumers.pop(entry_id, None)
        return entry, self._in_order(bucket) if bucket else []

    def without(self, entry_ids: Iterable[str]) -> OriginIndex:
        """Drop the live ones of ``entry_ids``: in place, or — when most of the index goes, as
        in a version move — as a new index of the rest (one ``add`` per entry kept instead of one
        ``remove`` per entry dropped). Use the index it returns."""
        doomed = {entry_id for entry_id in entry_ids if entry_id in self.entries}
        if len(doomed) * 2 > len(self.entries):
            return OriginIndex(e for e in self.entries.values() if e.id not in doomed)
        for entry_id in doomed:
            self.remove(entry_id)
        return self

    def get(self, entry_id: str) -> MemoryEntry | None:
        return self.entries.get(entry_id)

    def consumers_of(self, entry_id: str) -> list[MemoryEntry]:
        """Live entries learned while ``entry_id`` was injected (its ``derived_from`` children)."""
        bucket = self._consumers.get(entry_id)
        return self._in_order(bucket) if bucket else []

    def by_key(self, key: MemoryKey) -> MemoryEntry | None:
        eid = self._by_key.get(key)
        return self.entries[eid] if eid is not None else None

    def on_table(self, table: str) -> list[MemoryEntry]:
        """Entries depending on ``table`` at all (by rows or whole)."""
        return self._in_order(self._by_table.get(table, {}))

    def on_row(self, table: str, key: str) -> list[MemoryEntry]:
        """Entries that read row ``key`` of ``table``."""
        return self._in_order(self._by_row.get((table, key), {}))

    def whole_table(self, table: str) -> list[MemoryEntry]:
        """Entries that depend on ``table`` at table granularity (no keys)."""
        return self._in_order(self._whole.get(table, {}))

    def on_key_set(self, table: str) -> list[MemoryEntry]:
        """Entries that read which keys ``table`` holds (a key added or removed concerns them)."""
        return self._in_order(self._key_set.get(table, {}))

    def with_rule(self, rule: RuleTriple) -> list[MemoryEntry]:
        return self._in_order(self._by_rule.get(rule, {}))

    def rule_dependent(self) -> list[MemoryEntry]:
        """Entries that relied on at least one rule."""
        return self._in_order(self._rule_dependent)

    def of_type(self, type: str) -> list[MemoryEntry]:
        return self._in_order(self._by_type.get(type, {}))

    def matching(self, draft: Mapping[str, Any], operation: str = "") -> list[MemoryEntry]:
        """The entries of ``operation`` that ``MemoryEntry.matches`` ``draft``, in store order.

        An entry can match only if the draft holds its first scope field with an equal value, so
        only the operation's entries keyed on one of the draft's values (and its unscoped ones)
        are checked, not every entry.
        """
        ids = set(self._unscoped.get(operation, ()))
        for name, value in draft.items():
            try:
                token = (operation, name, canonical_json(value))
            except (TypeError, ValueError):  # not JSON: ``matches`` falls back to ``==``
                return [e for e in self if e.operation == operation and e.matches(draft)]
            ids.update(self._by_scope.get(token, ()))
        return [entry for entry in self._ordered(ids) if entry.matches(draft)]

    def _in_order(self, bucket: Bucket) -> list[MemoryEntry]:
        """A bucket's live entries, in store order (the order they were added)."""
        entries = self.entries
        return [entries[i] for i in bucket if i in entries]

    def _ordered(self, ids: Iterable[str]) -> list[MemoryEntry]:
        """Entries of ids from several buckets, sorted into store order."""
        return sorted((self.entries[i] for i in ids if i in self.entries), key=lambda e: e.serial)


def _scope_token(key: MemoryKey) -> ScopeToken | None:
    items = key.scope_items
    if not items:
        return None
    name, value = items[0]
    return key.operation, name, canonical_json(value)


def _discard(index: dict[Any, Bucket], name: object, entry_id: str) -> None:
    bucket = index.get(name)
    if bucket is not None:
        bucket.pop(entry_id, None)
        if not bucket:
            del index[name]
