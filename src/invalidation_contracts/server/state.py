"""One immutable registry state: every table snapshot, the rules and graph, and the history position."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..protocol.models import GraphEdge, GraphListing, GraphNode, RulesListing
from ..protocol.problems import ProblemType, ProtocolError
from .graph import KnowledgeGraph, node_id
from .rules import RuleSet
from .tables import Snapshot


@dataclass(frozen=True, slots=True)
class RegistryState:
    """What a request sees. A reload builds a new state; readers holding the old one are unaffected."""

    tables: Mapping[str, Snapshot]
    rules: RuleSet
    graph: KnowledgeGraph
    seq: int
    epoch: str
    changed_at: Mapping[str, int]
    """table → the ``seq`` at which its version last moved (0: the initial load)."""
    rules_changed_at: int = 0
    """The ``seq`` at which the rule declarations last changed (0: the initial load)."""

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
        """The L5 graph: a node per row of every table a rule names, an edge per rule instance."""
        nodes = {
            node_id(name, key): GraphNode(table=name, key=key, version=self.tables[name].version)
            for name in sorted(self.rules.tables & set(self.tables))
            for key in sorted(self.tables[name].rows)
        }
        edges = [GraphEdge(from_=a, to=b, relation=r) for a, b, r in self.graph.edges()]
        return GraphListing(
            nodes=nodes, edges=edges, rules_version=self.rules.version, contract_seq=self.seq
        )

    def rules_listing(self) -> RulesListing:
        return RulesListing(
            rules_version=self.rules.version, rules=[rule.to_declaration() for rule in self.rules]
        )
