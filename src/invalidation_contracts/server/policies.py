"""The policy API: a policy checks a request against the tables and reports violations with fixes."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..protocol.models import Action
from .tracking import ReadTracker, TrackedTables


@dataclass(frozen=True, slots=True)
class Violation:
    """One way a request fails a policy, with the change that makes it pass.

    ``precondition`` holds the request values a conditional rewrite assumes (they become JSON Patch
    ``test`` operations); ``scope`` the request fields the fix is keyed on; ``table`` overrides the
    primary table (by default the last table the policy read).
    """

    type: str
    message: str
    parameters: Mapping[str, Any]
    action: Action
    scope: Mapping[str, Any] = field(default_factory=dict)
    precondition: Mapping[str, Any] = field(default_factory=dict)
    table: str | None = None
    no_store: bool = False
    max_age_s: int | None = None


@runtime_checkable
class Policy(Protocol):
    """A named check; it reads tables only through ``tables`` so its dependencies are captured."""

    @property
    def name(self) -> str: ...

    def check(self, request: Mapping[str, Any], tables: TrackedTables) -> Iterable[Violation]: ...


CheckFunction = Callable[
    [Mapping[str, Any], TrackedTables], "Violation | Iterable[Violation] | None"
]


@dataclass(frozen=True, slots=True)
class FunctionPolicy:
    """A policy made from a plain function returning None, one violation, or several."""

    name: str
    function: CheckFunction

    def check(self, request: Mapping[str, Any], tables: TrackedTables) -> list[Violation]:
        result = self.function(request, tables)
        if result is None:
            return []
        if isinstance(result, Violation):
            return [result]
        return list(result)


def policy(name: str | None = None) -> Callable[[CheckFunction], FunctionPolicy]:
    """Decorator: ``@policy("funding_type_policy")`` turns a check function into a policy."""

    def wrap(function: CheckFunction) -> FunctionPolicy:
        return FunctionPolicy(name or function.__name__, function)

    return wrap


@dataclass(frozen=True, slots=True)
class Finding:
    """A violation together with what the policy read to reach it."""

    policy: str
    violation: Violation
    reads: Mapping[str, frozenset[str] | None]
    tables_in_read_order: tuple[str, ...]
    rules: tuple[tuple[str, str, str], ...]

    @property
    def cacheable(self) -> bool:
        return bool(self.reads) and not self.violation.no_store

    @property
    def primary_table(self) -> str | None:
        if not self.reads:
            return None
        return self.violation.table or self.tables_in_read_order[-1]


def evaluate(
    policies: Iterable[Policy], request: Mapping[str, Any], snapshots: Mapping, rules
) -> list[Finding]:
    """Run every policy on one consistent view; each violation carries its own policy's reads."""
    findings: list[Finding] = []
    for pol in policies:
        tracker = ReadTracker()
        violations = list(pol.check(request, TrackedTables(snapshots, rules, tracker)))
        reads = tracker.reads()
        for violation in violations:
            findings.append(
                Finding(pol.name, violation, reads, tuple(tracker.tables), tuple(tracker.rules))
            )
    return findings
