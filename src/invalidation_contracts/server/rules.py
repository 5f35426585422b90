"""Derivation rules: declarations that rows of one table relate to rows of another."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..protocol.canonical import rules_version
from ..protocol.models import RuleDeclaration, RuleTriple
from ..protocol.problems import ProblemType, ProtocolError


@dataclass(frozen=True, slots=True, order=True)
class Rule:
    """``from_table`` row → ``to_table`` row under ``relation``.

    The target key is the from-row's ``via`` field (a string, or a list of strings), or the same
    key when ``via`` is None.
    """

    from_table: str
    to_table: str
    relation: str
    via: str | None = None

    @property
    def triple(self) -> RuleTriple:
        return (self.from_table, self.to_table, self.relation)

    def targets(self, key: str, row: Mapping[str, Any]) -> tuple[str, ...]:
        """The to-table keys one from-row points at (empty when the via field is absent)."""
        if self.via is None:
            return (key,)
        value = row.get(self.via)
        if isinstance(value, str):
            return (value,)
        if isinstance(value, (list, tuple)):
            return tuple(v for v in value if isinstance(v, str))
        return ()

    @classmethod
    def from_declaration(cls, decl: RuleDeclaration) -> Rule:
        return cls(decl.from_table, decl.to_table, decl.relation, decl.via)

    def to_declaration(self) -> RuleDeclaration:
        return RuleDeclaration(
            from_table=self.from_table, to_table=self.to_table, relation=self.relation, via=self.via
        )


class RuleSet:
    """An immutable, validated set of rules with its fingerprint (``rules_version``)."""

    __slots__ = ("__dict__", "rules")

    def __init__(self, rules: Iterable[Rule] = ()) -> None:
        ordered = tuple(sorted(rules, key=lambda r: (r.triple, r.via or "")))
        seen: dict[RuleTriple, Rule] = {}
        for rule in ordered:
            if not (rule.from_table and rule.to_table and rule.relation):
                raise ProtocolError(
                    ProblemType.INVALID_RULES, f"rule {rule.triple} has an empty name"
                )
            if rule.via is not None and not rule.via:
                raise ProtocolError(
                    ProblemType.INVALID_RULES,
                    f"rule {rule.triple}: 'via' names no field (omit it instead)",
                )
            if rule.triple in seen:
                same = seen[rule.triple] == rule
                raise ProtocolError(
                    ProblemType.INVALID_RULES,
                    f"rule {rule.triple} is declared twice"
                    + ("" if same else " with different 'via'"),
                )
            seen[rule.triple] = rule
        self.rules: tuple[Rule, ...] = ordered

    @cached_property
    def version(self) -> str:
        """The fingerprint: over each rule's triple and its ``via`` (SPEC §6)."""
        return rules_version((*rule.triple, rule.via) for rule in self.rules)

    @cached_property
    def triples(self) -> frozenset[RuleTriple]:
        return frozenset(rule.triple for rule in self.rules)

    @cached_property
    def vias(self) -> Mapping[RuleTriple, str]:
        """The ``via`` of each rule that has one, by triple."""
        return {rule.triple: rule.via for rule in self.rules if rule.via is not None}

    @cached_property
    def by_from_table(self) -> Mapping[str, tuple[Rule, ...]]:
        index: dict[str, list[Rule]] = {}
        for rule in self.rules:
            index.setdefault(rule.from_table, []).append(rule)
        return {table: tuple(rules) for table, rules in index.items()}

    @cached_property
    def tables(self) -> frozenset[str]:
        return frozenset(t for rule in self.rules for t in (rule.from_table, rule.to_table))

    def find(self, from_table: str, to_table: str, relation: str | None = None) -> tuple[Rule, ...]:
        return tuple(
            r
            for r in self.by_from_table.get(from_table, ())
            if r.to_table == to_table and (relation is None or r.relation == relation)
        )

    def check_tables(self, known: Iterable[str]) -> None:
        """Refuse rules that name a table the registry does not hold."""
        missing = sorted(self.tables - set(known))
        if missing:
            raise ProtocolError(
                ProblemType.INVALID_RULES, f"rules name unknown tables: {', '.join(missing)}"
            )

    def __iter__(self) -> Iterator[Rule]:
        return iter(self.rules)

    def __len__(self) -> int:
        return len(self.rules)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RuleSet) and self.rules == other.rules

    def __hash__(self) -> int:
        return hash(self.rules)

    def __repr__(self) -> str:
        return f"RuleSet({list(self.rules)!r})"
