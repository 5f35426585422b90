"""The knowledge graph (L5): nodes ``table:key``, one edge per rule instance.

Kept as an index of out-edges per table, rebuilt incrementally on reload: only the rows a reload
touched get their edges recomputed. ``downstream`` walks it at any depth, cycles included.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from .rules import RuleSet
from .tables import Snapshot, mutable_copy

Edge = tuple[str, str]  # (target node, relation)
_EMPTY: frozenset[Edge] = frozenset()


def node_id(table: str, key: str) -> str:
    return f"{table}:{key}"


def split_node(node: str) -> tuple[str, str]:
    table, _, key = node.partition(":")
    return table, key


def _row_edges(snapshot: Snapshot, rules: RuleSet, key: str) -> frozenset[Edge]:
    row = snapshot.rows.get(key)
    if row is None:
        return _EMPTY
    return frozenset(
        (node_id(rule.to_table, target), rule.relation)
        for rule in rules.by_from_table.get(snapshot.name, ())
        for target in rule.targets(key, row)
    )


def _table_edges(snapshot: Snapshot, rules: RuleSet) -> Mapping[str, frozenset[Edge]]:
    out = {}
    for key in snapshot.rows:
        edges = _row_edges(snapshot, rules, key)
        if edges:
            out[key] = edges
    return MappingProxyType(out)


@dataclass(frozen=True, slots=True)
class KnowledgeGraph:
    """Out-edges by table then key.

    Immutable; updates return a new graph sharing untouched tables.
    """

    out: Mapping[str, Mapping[str, frozenset[Edge]]]

    @classmethod
    def build(cls, tables: Mapping[str, Snapshot], rules: RuleSet) -> KnowledgeGraph:
        return cls(
            MappingProxyType(
                {
                    name: _table_edges(snapshot, rules)
                    for name, snapshot in tables.items()
                    if name in rules.by_from_table
                }
            )
        )

    def with_rows(self, snapshot: Snapshot, rules: RuleSet, keys: Iterable[str]) -> KnowledgeGraph:
        """The graph after ``snapshot`` replaced its table, recomputing only the rows in
        ``keys``."""
        if snapshot.name not in rules.by_from_table:
            return self
        current = self.out.get(snapshot.name)
        table = mutable_copy(current) if current is not None else {}
        for key in keys:
            edges = _row_edges(snapshot, rules, key)
            if edges:
                table[key] = edges
            else:
                table.pop(key, None)
        out = dict(self.out)
        out[snapshot.name] = MappingProxyType(table)
        return KnowledgeGraph(MappingProxyType(out))

    def successors(self, node: str) -> frozenset[Edge]:
        table, key = split_node(node)
        return self.out.get(table, {}).get(key, _EMPTY)

    def edges(self) -> Iterator[tuple[str, str, str]]:
        """Every edge as (from, to, relation), in a stable order."""
        for table in sorted(self.out):
            for key in sorted(self.out[table]):
                source = node_id(table, key)
                for target, relation in sorted(self.out[table][key]):
                    yield source, target, relation

    def downstream(self, start: Iterable[str]) -> list[str]:
        """Nodes reachable by one or more edges from ``start``, excluding ``start`` itself;
        sorted."""
        origin = set(start)
        seen: set[str] = set()
        queue = deque(origin)
        while queue:
            for target, _ in self.successors(queue.popleft()):
                if target not in seen:
                    seen.add(target)
                    queue.append(target)
        return sorted(seen - origin)

    def __len__(self) -> int:
        return sum(len(edges) for table in self.out.values() for edges in table.values())
