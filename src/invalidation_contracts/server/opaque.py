"""Opaque names: the contract without schema disclosure (SPEC §10.6).

With a server secret, every table name, row key and rule relation a client can see is replaced
by a keyed tag — HMAC-SHA256, truncated, stable for the key — in ``table_versions``, in
suggestions (``table``, ``tables[].table``, ``tables[].keys``, ``rules``, ``rule_vias``), in the
changes feed, the graph and the rule listing (a rule's ``via`` too); ``rules_version`` becomes a
tag of the real fingerprint. The mapping is a bijection per key, so a client comparing tags
invalidates exactly as it would with names, and learns nothing of the schema. Tags are
domain-separated (a row key is tagged with its table), so equal keys in two tables do not
correlate. Admin routes keep the real names.

Pure: wire models in, wire models out.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

from ..protocol.canonical import RULES_VERSION_LENGTH, canonical_json
from ..protocol.models import (
    ChangesFeed,
    ContractFields,
    GraphEdge,
    GraphListing,
    GraphNode,
    Membership,
    RuleChange,
    RuleDeclaration,
    RulePattern,
    RulesListing,
    RuleTriple,
    Suggestion,
    TableDependency,
)
from ..protocol.problems import ProblemType, ProtocolError
from .graph import node_id, split_node

#: Hex characters of a name tag (64 bits).
TAG_LENGTH = 16
MIN_KEY_BYTES = 16

C = TypeVar("C", bound=ContractFields)


TAG_CACHE_SIZE = 65_536


class OpaqueNames:
    """Maps a provider's names to keyed tags (and tags of the loaded tables back to names)."""

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, bytes) or len(key) < MIN_KEY_BYTES:
            raise ValueError(f"an opaque-names key must be at least {MIN_KEY_BYTES} bytes")
        self._key = key
        self._tags: dict[tuple[str, ...], str] = {}
        """Tags already computed (asked on every response); cleared past ``TAG_CACHE_SIZE``."""

    # -- names -------------------------------------------------------------------------------

    def table(self, name: str) -> str:
        return self._tag("table", name)

    def row(self, table: str, key: str) -> str:
        return self._tag("row", table, key)

    def relation(self, name: str) -> str:
        return self._tag("relation", name)

    def via(self, from_table: str, field: str) -> str:
        """A rule's ``via`` (a field of ``from_table``'s rows), tagged with its table."""
        return self._tag("via", from_table, field)

    def rules_version(self, version: str) -> str:
        return self._tag("rules", version)[:RULES_VERSION_LENGTH]

    def node(self, node: str) -> str:
        table, key = split_node(node)
        return node_id(self.table(table), self.row(table, key))

    def triple(self, triple: Sequence[str]) -> RuleTriple:
        a, b, relation = triple
        return (self.table(a), self.table(b), self.relation(relation))

    def pattern(self, pattern: RulePattern) -> RulePattern:
        """A rule lookup with its names tagged (a wildcard stays ``None``)."""
        a, b, relation = pattern
        return (
            self.table(a),
            None if b is None else self.table(b),
            None if relation is None else self.relation(relation),
        )

    def tables_named(self, tags: Iterable[str], names: Iterable[str]) -> list[str]:
        """The real names of ``tags`` among the loaded tables ``names``; unknown-table otherwise."""
        by_tag = {self.table(name): name for name in names}
        out = []
        for tag in tags:
            if tag not in by_tag:
                raise ProtocolError(ProblemType.UNKNOWN_TABLE, f"no reference table tagged {tag!r}")
            out.append(by_tag[tag])
        return out

    # -- wire objects ------------------------------------------------------------------------

    def contract(self, body: C) -> C:
        """Response-level fields (and the suggestions of a problem document), tagged."""
        update: dict[str, object] = {}
        if body.table_versions is not None:
            update["table_versions"] = self._versions(body.table_versions)
        if body.rules_version is not None:
            update["rules_version"] = self.rules_version(body.rules_version)
        feedback = getattr(body, "recovery_feedback", None)
        if feedback is not None:
            update["recovery_feedback"] = feedback.model_copy(
                update={"suggestions": [self.suggestion(s) for s in feedback.suggestions]}
            )
        return body.model_copy(update=update)

    def suggestion(self, suggestion: Suggestion) -> Suggestion:
        update: dict[str, object] = {}
        if suggestion.table is not None:
            update["table"] = self.table(suggestion.table)
        if suggestion.tables is not None:
            update["tables"] = [self._dependency(dep) for dep in suggestion.tables]
        if suggestion.rules is not None:
            vias = suggestion.rule_vias or [None] * len(suggestion.rules)
            tagged = sorted(
                (
                    (self.triple(rule), None if via is None else self.via(rule[0], via))
                    for rule, via in zip(suggestion.rules, vias, strict=True)
                ),
                key=lambda pair: pair[0],
            )
            update["rules"] = [rule for rule, _ in tagged]
            if suggestion.rule_vias is not None:
                update["rule_vias"] = [via for _, via in tagged]
        if suggestion.absent_rules is not None:
            update["absent_rules"] = sorted(
                (self.pattern(p) for p in suggestion.absent_rules), key=_pattern_order
            )
        return suggestion.model_copy(update=update)

    def feed(self, feed: ChangesFeed) -> ChangesFeed:
        rows = [
            row.model_copy(
                update={"table": self.table(row.table), "key": self.row(row.table, row.key)}
            )
            for row in feed.rows
        ]
        rows.sort(key=lambda r: (r.seq, r.table, r.op, r.key))
        tables = [
            tr.model_copy(
                update={
                    "table": self.table(tr.table),
                    "affected_downstream": sorted(self.node(n) for n in tr.affected_downstream),
                }
            )
            for tr in feed.tables
        ]
        return feed.model_copy(
            update={
                "rows": rows,
                "tables": tables,
                "rules": [self._rule_change(r) for r in feed.rules],
            }
        )

    def graph(self, listing: GraphListing) -> GraphListing:
        nodes = {
            self.node(nid): GraphNode(
                table=self.table(node.table),
                key=self.row(node.table, node.key),
                version=node.version,
                absent=node.absent,
            )
            for nid, node in listing.nodes.items()
        }
        edges = sorted(
            (
                GraphEdge(
                    from_=self.node(e.from_), to=self.node(e.to), relation=self.relation(e.relation)
                )
                for e in listing.edges
            ),
            key=lambda e: (e.from_, e.to, e.relation),
        )
        return listing.model_copy(
            update={
                "nodes": dict(sorted(nodes.items())),
                "edges": edges,
                "rules_version": (
                    self.rules_version(listing.rules_version) if listing.rules_version else None
                ),
            }
        )

    def rules_listing(self, listing: RulesListing) -> RulesListing:
        rules = sorted(
            (
                RuleDeclaration(
                    from_table=a,
                    to_table=b,
                    relation=r,
                    via=None if rule.via is None else self.via(rule.from_table, rule.via),
                )
                for rule in listing.rules
                for a, b, r in (self.triple(rule.triple),)
            ),
            key=lambda d: d.triple,
        )
        return RulesListing(rules_version=self.rules_version(listing.rules_version), rules=rules)

    # -- internals ---------------------------------------------------------------------------

    def _tag(self, *parts: str) -> str:
        tag = self._tags.get(parts)
        if tag is None:
            if len(self._tags) >= TAG_CACHE_SIZE:
                self._tags.clear()
            digest = hmac.new(self._key, canonical_json(list(parts)), hashlib.sha256)
            tag = self._tags[parts] = digest.hexdigest()[:TAG_LENGTH]
        return tag

    def _versions(self, versions: Mapping[str, str]) -> dict[str, str]:
        return dict(sorted((self.table(name), version) for name, version in versions.items()))

    def _dependency(self, dep: TableDependency) -> TableDependency:
        keys = None if dep.keys is None else sorted(self.row(dep.table, k) for k in dep.keys)
        membership = (
            None
            if dep.membership is None
            else Membership(keys=sorted(self.row(dep.table, k) for k in dep.membership.keys))
        )
        return TableDependency(
            table=self.table(dep.table), version=dep.version, keys=keys, membership=membership
        )

    def _rule_change(self, change: RuleChange) -> RuleChange:
        return change.model_copy(
            update={
                "old_rules_version": self.rules_version(change.old_rules_version),
                "new_rules_version": self.rules_version(change.new_rules_version),
                "added": sorted(self.triple(t) for t in change.added),
                "removed": sorted(self.triple(t) for t in change.removed),
            }
        )


def _pattern_order(pattern: RulePattern) -> tuple[str, ...]:
    return tuple(part or "" for part in pattern)
