"""Read-tracking views: every row a policy reads becomes part of its fix's dependency vector.

Policies never hand-write their dependencies; they read tables (and rules) through these views,
and whatever they touched is what the suggestion depends on. A fix that read nothing is
``recompute``. Looking a key up (``t[k]``, ``t.get(k)``, ``k in t``) depends on that row;
iterating a table or taking its length depends on its *key set* (a membership dependency: adding
or removing a key can change the fix, a change to a row's contents cannot, unless that row was
also read). Reading the key set and every row is the same as depending on the whole table, and is
reported so.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterator, Mapping
from typing import Any, Final

from ..protocol.models import Membership, RulePattern, RuleTriple, TableDependency
from .faults import PolicyError
from .rules import Rule, RuleSet
from .tables import Snapshot

WHOLE_TABLE = None


class _Unread(enum.Enum):
    """A table no read of this evaluation touched yet (``dict.get``'s default, by identity)."""

    UNREAD = enum.auto()


_UNREAD: Final = _Unread.UNREAD


class ReadTracker:
    """The ordered record of what one policy evaluation read."""

    __slots__ = ("_absent_rules", "_key_sets", "_reads", "_rules", "last_row")

    def __init__(self) -> None:
        self.last_row: tuple[str, str] | None = None
        """The last ``(table, key)`` looked up: where a write to a read-only row came from."""
        self._reads: dict[str, set[str] | None] = {}
        self._key_sets: dict[str, Collection[str]] = {}
        self._rules: dict[RuleTriple, None] = {}
        self._absent_rules: dict[RulePattern, None] = {}

    def read_key(self, table: str, key: str) -> None:
        self.last_row = (table, key)
        keys = self._reads.get(table, _UNREAD)
        if keys is _UNREAD:
            self._reads[table] = {key}
        elif keys is not None:
            keys.add(key)

    def read_table(self, table: str) -> None:
        """Depend on every row of ``table`` (its key set and all contents)."""
        self._reads[table] = WHOLE_TABLE
        self._key_sets.pop(table, None)

    def read_key_set(self, table: str, keys: Collection[str]) -> None:
        """Depend on which keys ``table`` holds (``keys``: its current key set, not copied)."""
        current = self._reads.get(table, _UNREAD)
        if current is _UNREAD:
            self._reads[table] = set()
        elif current is None:
            return
        self._key_sets[table] = keys

    def read_rule(self, triple: RuleTriple) -> None:
        self._rules[triple] = None

    def read_absent_rules(self, pattern: RulePattern) -> None:
        """Record a rule lookup whose answer would change if a matching rule were declared."""
        self._absent_rules[pattern] = None

    @property
    def tables(self) -> list[str]:
        """Tables read, in first-read order."""
        return list(self._reads)

    @property
    def rules(self) -> list[RuleTriple]:
        """Rules found, in first-read order."""
        return list(self._rules)

    @property
    def absent_rules(self) -> list[RulePattern]:
        """Rule patterns looked up (``None``: any); a match outside ``rules`` was not declared."""
        return list(self._absent_rules)

    def reads(self) -> dict[str, frozenset[str] | None]:
        """table → rows read (None: the whole table, including its key set and every row)."""
        return {t: (None if k is None else frozenset(k)) for t, k in self._normalized()}

    @property
    def key_sets(self) -> frozenset[str]:
        """Tables whose key set was read and not every row (membership dependencies)."""
        return frozenset(t for t, k in self._normalized() if k is not None and t in self._key_sets)

    def dependencies(self, versions: Mapping[str, str]) -> list[TableDependency]:
        """The dependency vector, stamped with ``versions``; tables in first-read order."""
        key_sets = self.key_sets
        return [
            table_dependency(t, versions[t], None if k is None else frozenset(k), t in key_sets)
            for t, k in self._normalized()
        ]

    def _normalized(self) -> list[tuple[str, set[str] | None]]:
        """Reads in first-read order; a key set read together with every row is the table."""
        out: list[tuple[str, set[str] | None]] = []
        for table, keys in self._reads.items():
            members = self._key_sets.get(table)
            if keys is not None and members is not None and keys.issuperset(members):
                keys = None
            out.append((table, keys))
        return out


def table_dependency(
    table: str, version: str, keys: frozenset[str] | None, key_set: bool
) -> TableDependency:
    """One dependency-vector item: whole table, rows, or (``key_set``) the key set and rows."""
    if keys is None:
        return TableDependency(table=table, version=version)
    if key_set:
        return TableDependency(
            table=table, version=version, membership=Membership(keys=sorted(keys))
        )
    return TableDependency(table=table, version=version, keys=sorted(keys))


class TrackedTable(Mapping[str, Mapping[str, Any]]):
    """A read-only, read-recording view of one snapshot.

    A key lookup depends on that row; iterating or ``len`` on the key set; ``items()`` or
    ``values()`` (the key set and every row) on the whole table.
    """

    __slots__ = ("_snapshot", "_tracker")

    def __init__(self, snapshot: Snapshot, tracker: ReadTracker) -> None:
        self._snapshot = snapshot
        self._tracker = tracker

    @property
    def name(self) -> str:
        return self._snapshot.name

    def __getitem__(self, key: str) -> Mapping[str, Any]:
        self._tracker.read_key(self._snapshot.name, key)
        return self._snapshot.rows[key]

    def get(self, key: str, default: object = None) -> Any:
        self._tracker.read_key(self._snapshot.name, key)
        return self._snapshot.rows.get(key, default)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self._tracker.read_key(self._snapshot.name, key)
        return key in self._snapshot.rows

    def __iter__(self) -> Iterator[str]:
        rows = self._snapshot.rows
        self._tracker.read_key_set(self._snapshot.name, rows.keys())
        return iter(rows)

    def __len__(self) -> int:
        rows = self._snapshot.rows
        self._tracker.read_key_set(self._snapshot.name, rows.keys())
        return len(rows)

    def __setitem__(self, key: str, value: object) -> None:
        raise self._write(key)

    def __delitem__(self, key: str) -> None:
        raise self._write(key)

    def _write(self, key: object) -> PolicyError:
        return PolicyError(
            f"writes to table {self._snapshot.name!r} (key {key!r}); reference tables are "
            "read-only to a policy",
            table=self._snapshot.name,
        )


class TrackedRules:
    """Read-recording access to the rule declarations in force."""

    __slots__ = ("_rules", "_tracker")

    def __init__(self, rules: RuleSet, tracker: ReadTracker) -> None:
        self._rules = rules
        self._tracker = tracker

    def find(self, from_table: str, to_table: str, relation: str | None = None) -> tuple[Rule, ...]:
        """The rules from ``from_table`` to ``to_table``, all dependencies: the ones found, and
        the lookup itself when a rule declared later could join the answer (nothing found, or
        any relation asked for)."""
        found = self._rules.find(from_table, to_table, relation)
        self._record(found, (from_table, to_table, relation), exact=relation is not None)
        return found

    def declares(self, from_table: str, to_table: str, relation: str) -> bool:
        """Whether the rule is declared; either answer is a dependency."""
        return bool(self.find(from_table, to_table, relation))

    def from_table(self, table: str) -> tuple[Rule, ...]:
        """Every rule from ``table``; a rule from it declared later changes the answer."""
        found = self._rules.by_from_table.get(table, ())
        self._record(found, (table, None, None), exact=False)
        return found

    def _record(self, found: tuple[Rule, ...], pattern: RulePattern, *, exact: bool) -> None:
        for rule in found:
            self._tracker.read_rule(rule.triple)
        if not (exact and found):
            self._tracker.read_absent_rules(pattern)


class TrackedTables:
    """What a policy gets: ``tables["name"]`` and ``tables.rules``, all reads recorded."""

    __slots__ = ("_rules", "_snapshots", "_tracked_rules", "_tracker")

    def __init__(
        self, snapshots: Mapping[str, Snapshot], rules: RuleSet, tracker: ReadTracker
    ) -> None:
        self._snapshots = snapshots
        self._tracker = tracker
        self._rules = rules
        self._tracked_rules: TrackedRules | None = None

    @property
    def rules(self) -> TrackedRules:
        """The rule declarations in force, every lookup recorded (made on first use)."""
        if self._tracked_rules is None:
            self._tracked_rules = TrackedRules(self._rules, self._tracker)
        return self._tracked_rules

    def __getitem__(self, name: str) -> TrackedTable:
        snapshot = self._snapshots.get(name)
        if snapshot is None:
            known = ", ".join(sorted(self._snapshots)) or "none"
            raise PolicyError(
                f"reads table {name!r}, which the registry does not hold (tables: {known})",
                table=name,
            )
        return TrackedTable(snapshot, self._tracker)

    def __contains__(self, name: object) -> bool:
        return name in self._snapshots

    @property
    def tracker(self) -> ReadTracker:
        return self._tracker
