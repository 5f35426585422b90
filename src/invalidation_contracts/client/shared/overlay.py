"""One call's view of an origin's entries: the committed index plus what the call changed.

A memory call never edits the committed index directly. It reads and changes an ``IndexOverlay``;
only once the call's batch is committed to the store is the overlay folded into the index
(``fold_into``). A call that loses a race with another writer is simply thrown away, and nobody
ever reads an entry that was not committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ...protocol.models import RuleTriple
from ..entries import MemoryEntry, MemoryKey
from .index import OriginIndex


class IndexOverlay:
    """``OriginIndex``'s queries over ``base`` with this call's stores, restamps and removals."""

    def __init__(self, base: OriginIndex) -> None:
        self.base = base
        self.new = OriginIndex()
        """Entries stored by this call (their serials are above every committed one)."""
        self.restamped: dict[str, MemoryEntry] = {}
        """Committed entries this call stamped anew (same tables and keys, new versions)."""
        self.gone: set[str] = set()
        """Committed entries this call removed."""
        self.entries = _Entries(self)

    # ------------------------------------------------------------------ reads

    def get(self, entry_id: str) -> MemoryEntry | None:
        entry = self.new.entries.get(entry_id)
        if entry is not None:
            return entry
        if entry_id in self.gone:
            return None
        return self.restamped.get(entry_id) or self.base.entries.get(entry_id)

    def __contains__(self, entry_id: object) -> bool:
        return isinstance(entry_id, str) and self.get(entry_id) is not None

    def __len__(self) -> int:
        return len(self.base) - len(self.gone) + len(self.new)

    @property
    def row_keys(self) -> int:
        """Row keys the live entries' dependencies name, as this call sees them."""
        gone = sum(self.base.entries[e].row_keys for e in self.gone if e in self.base.entries)
        return self.base.row_keys - gone + self.new.row_keys

    def __iter__(self) -> Iterator[MemoryEntry]:
        yield from self._seen(self.base)
        yield from self.new

    def by_key(self, key: MemoryKey) -> MemoryEntry | None:
        entry = self.new.by_key(key)
        if entry is not None:
            return entry
        entry = self.base.by_key(key)
        if entry is None or entry.id in self.gone:
            return None
        return self.restamped.get(entry.id, entry)

    def on_table(self, table: str) -> list[MemoryEntry]:
        return self._seen(self.base.on_table(table)) + self.new.on_table(table)

    def on_row(self, table: str, key: str) -> list[MemoryEntry]:
        return self._seen(self.base.on_row(table, key)) + self.new.on_row(table, key)

    def whole_table(self, table: str) -> list[MemoryEntry]:
        return self._seen(self.base.whole_table(table)) + self.new.whole_table(table)

    def on_key_set(self, table: str) -> list[MemoryEntry]:
        return self._seen(self.base.on_key_set(table)) + self.new.on_key_set(table)

    def with_rule(self, rule: RuleTriple) -> list[MemoryEntry]:
        return self._seen(self.base.with_rule(rule)) + self.new.with_rule(rule)

    def rule_dependent(self) -> list[MemoryEntry]:
        return self._seen(self.base.rule_dependent()) + self.new.rule_dependent()

    def of_type(self, type: str) -> list[MemoryEntry]:
        return self._seen(self.base.of_type(type)) + self.new.of_type(type)

    def consumers_of(self, entry_id: str) -> list[MemoryEntry]:
        return self._seen(self.base.consumers_of(entry_id)) + self.new.consumers_of(entry_id)

    def matching(self, draft: Mapping[str, Any], operation: str = "") -> list[MemoryEntry]:
        return self._seen(self.base.matching(draft, operation)) + self.new.matching(
            draft, operation
        )

    # ------------------------------------------------------------------ changes

    def add(self, entry: MemoryEntry) -> None:
        self.new.add(entry)

    def replace(self, entry: MemoryEntry) -> None:
        """Swap in a restamped copy (same id, same tables and keys)."""
        if entry.id in self.new.entries:
            self.new.replace(entry)
        else:
            self.restamped[entry.id] = entry

    def remove(
        self, entry_id: str, *, consumers: bool = True
    ) -> tuple[MemoryEntry, list[MemoryEntry]]:
        """Drop a live entry; return it and (``consumers``) its live consumers. Only a cascade
        needs them: a move that does not cascade lists none (issue 38, the move's compute)."""
        found = self.consumers_of(entry_id) if consumers else []
        if entry_id in self.new.entries:
            entry, _ = self.new.remove(entry_id)
            return entry, found
        live = self.get(entry_id)
        if live is None:
            raise KeyError(entry_id)
        self.gone.add(entry_id)
        self.restamped.pop(entry_id, None)
        return live, [c for c in found if c.id != entry_id]

    def fold_into(self, index: OriginIndex) -> OriginIndex:
        """Apply this call's changes to ``index`` (the committed index it was made over); returns
        the index to use from now on (``OriginIndex.without`` may build a new one)."""
        index = index.without(self.gone)
        for entry in self.restamped.values():
            index.replace(entry)
        for entry in self.new:
            index.add(entry)
        return index

    def _seen(self, entries: Iterable[MemoryEntry]) -> list[MemoryEntry]:
        """Committed entries as this call sees them: removed ones left out, restamps swapped in."""
        if not self.gone and not self.restamped:
            return list(entries)
        return [self.restamped.get(e.id, e) for e in entries if e.id not in self.gone]


class _Entries(Mapping[str, MemoryEntry]):
    """``overlay.entries``: the live entries by id, as ``OriginIndex.entries`` offers them."""

    def __init__(self, overlay: IndexOverlay) -> None:
        self._overlay = overlay

    def __getitem__(self, entry_id: str) -> MemoryEntry:
        entry = self._overlay.get(entry_id)
        if entry is None:
            raise KeyError(entry_id)
        return entry

    def __iter__(self) -> Iterator[str]:
        return (entry.id for entry in self._overlay)

    def __len__(self) -> int:
        return len(self._overlay)
