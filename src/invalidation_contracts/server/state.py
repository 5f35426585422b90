"""One immutable registry state: every table snapshot, the rules and graph, the history position."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ..protocol.models import GraphEdge, GraphListing, GraphNode, RulesListing
from ..protocol.problems import ProblemType, ProtocolError
from .graph import KnowledgeGraph, node_id, split_node
from .rules import RuleSet
from .tables import Snapshot


@dataclass(frozen=True, slots=True)
class RegistryState:
    """What a request sees. A reload builds a new state; readers of the old one are unaffected."""

    tables: Mapping[str, Snapshot]
    rules: RuleSet
    graph: KnowledgeGraph
    seq: int
    epoch: str
    changed_at: Mapping[str, int]
    """table → the ``seq`` at which its version last moved (0: the initial load)."""
    rules_changed_at: int = 0
    """The ``seq`` at which the rule declarations last changed (0: the initial load)."""

    @classmethod
    def starting(
        cls, tables: Mapping[str, Snapshot], rules: RuleSet, seq: int, epoch: str
    ) -> RegistryState:
        """The state that starts a history at ``seq`` in ``epoch``, every table and the rules
        counting as changed there (seq 0: the initial load; later: a new epoch)."""
        frozen = MappingProxyType(dict(tables))
        return cls(
            tables=frozen,
            rules=rules,
            graph=KnowledgeGraph.build(frozen, rules),
            seq=seq,
            epoch=epoch,
            changed_at=MappingProxyType(dict.fromkeys(frozen, seq)),
            rules_changed_at=seq,
        )

    def snapshot(self, table: str) -> Snapshot:
        try:
            return self.tables[table]
        except KeyError:
            raise ProtocolError(
                ProblemType.UNKNOWN_TABLE, f"no reference table named {table!r}"
            ) from None

    def versions(self, since: int | None = None) -> dict[str, str]:
        """``{table: version}``; with ``since``, only tables whose version moved after that seq."""
        return {
            name: snap.version
            for name, snap in sorted(self.tables.items())
            if since is None or self.changed_at.get(name, 0) > since
        }

    def graph_listing(self) -> GraphListing:
        """The L5 graph: an edge per rule instance; a node per row of every table a rule names,
        and per key an edge points at that has no row (``absent``)."""
        nodes = {
            node_id(name, key): GraphNode(table=name, key=key, version=self.tables[name].version)
            for name in sorted(self.rules.tables & set(self.tables))
            for key in sorted(self.tables[name].rows)
        }
        edges = [GraphEdge(from_=a, to=b, relation=r) for a, b, r in self.graph.edges()]
        for edge in edges:
            if edge.to not in nodes:
                table, key = split_node(edge.to)
                version = self.tables[table].version
                nodes[edge.to] = GraphNode(table=table, key=key, version=version, absent=True)
        nodes = dict(sorted(nodes.items(), key=lambda item: (item[1].table, item[1].key)))
        return GraphListing(
            nodes=nodes, edges=edges, rules_version=self.rules.version, contract_seq=self.seq
        )

    def rules_listing(self) -> RulesListing:
        return RulesListing(
            rules_version=self.rules.version, rules=[rule.to_declaration() for rule in self.rules]
        )
