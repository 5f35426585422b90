"""The policy API: a policy checks a request against the tables, reporting violations with fixes."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..protocol.models import Action, RulePattern, RuleTriple
from .faults import PolicyError
from .rules import RuleSet
from .tables import Snapshot
from .tracking import ReadTracker, TrackedTables


@dataclass(frozen=True, slots=True)
class Violation:
    """One way a request fails a policy, with the change that makes it pass.

    ``precondition`` holds the request values a conditional rewrite assumes (they become JSON Patch
    ``test`` operations); ``scope`` the request fields the fix is keyed on; ``table`` overrides the
    primary table (by default the last table the policy read). ``origin_wide``: the fix holds for
    every request of the route, whatever its fields (SPEC §5.2); it then has no scope.
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
    origin_wide: bool = False


@runtime_checkable
class Policy(Protocol):
    """A named check; it reads tables only through ``tables`` so its dependencies are captured."""

    @property
    def name(self) -> str: ...

    def check(self, request: Mapping[str, Any], tables: TrackedTables) -> Iterable[Violation]: ...


CheckResult = Violation | Iterable[Violation] | None
CheckFunction = Callable[[Mapping[str, Any], TrackedTables], CheckResult]


@dataclass(frozen=True, slots=True)
class FunctionPolicy:
    """A policy made from a plain function returning None, one violation, or several."""

    name: str
    function: CheckFunction

    def check(self, request: Mapping[str, Any], tables: TrackedTables) -> list[Violation]:
        return violations_of(self.function(request, tables))


def policy(name: str | None = None) -> Callable[[CheckFunction], FunctionPolicy]:
    """Decorator: ``@policy("funding_type_policy")`` turns a check function into a policy."""

    def wrap(function: CheckFunction) -> FunctionPolicy:
        return FunctionPolicy(name or function.__name__, function)

    return wrap


def violations_of(result: object) -> list[Violation]:
    """A check's result as a list: None, one ``Violation``, or an iterable of them.

    Anything else (a dict, a string, a list holding something other than violations) is a
    ``PolicyError``: a provider bug that must not pass for "no violation".
    """
    if result is None:
        return []
    if isinstance(result, Violation):
        return [result]
    if type(result) is list and all(isinstance(item, Violation) for item in result):
        return list(result)  # the common shape, without the generic Iterable check below
    if isinstance(result, Iterable) and not isinstance(result, (str, bytes, Mapping)):
        items = list(result)
        wrong = [item for item in items if not isinstance(item, Violation)]
        if not wrong:
            return items
        result = wrong[0]
    raise PolicyError(
        f"returned {type(result).__name__}; a check returns None, a Violation or Violations"
    )


@dataclass(frozen=True, slots=True)
class Finding:
    """A violation together with what the policy read to reach it."""

    policy: str
    violation: Violation
    reads: Mapping[str, frozenset[str] | None]
    tables_in_read_order: tuple[str, ...]
    rules: tuple[RuleTriple, ...]
    absent_rules: tuple[RulePattern, ...] = ()
    """Rule lookups the fix relied on; a matching rule declared later can change it."""
    key_sets: frozenset[str] = frozenset()
    """Tables whose key set the policy read (membership dependencies); their ``reads`` entry
    lists the rows whose contents it also read."""

    @property
    def cacheable(self) -> bool:
        return bool(self.reads) and not self.violation.no_store

    @property
    def primary_table(self) -> str | None:
        if not self.reads:
            return None
        return self.violation.table or self.tables_in_read_order[-1]


def evaluate(
    policies: Iterable[Policy],
    request: Mapping[str, Any],
    snapshots: Mapping[str, Snapshot],
    rules: RuleSet,
    *,
    fields: Collection[str] | None = None,
) -> list[Finding]:
    """Run every policy on one consistent view; each violation carries its own policy's reads.

    ``fields``: the request fields a fix may merge or test (its parameters and preconditions);
    None skips the check. A policy that breaks the API raises ``PolicyError`` naming it.
    """
    findings: list[Finding] = []
    for pol in policies:
        tracker = ReadTracker()
        try:
            violations = violations_of(pol.check(request, TrackedTables(snapshots, rules, tracker)))
            for violation in violations:
                _check_fields(violation, fields)
        except PolicyError as exc:
            exc.policy = pol.name
            raise
        except TypeError as exc:
            if "mappingproxy" not in str(exc) or tracker.last_row is None:
                raise
            table, key = tracker.last_row
            raise PolicyError(
                f"writes to a row of table {table!r} (the last row it read: {key!r}); rows are "
                "read-only to a policy",
                policy=pol.name,
                table=table,
            ) from exc
        if not violations:
            continue
        reads = tracker.reads()
        order, found = tuple(tracker.tables), tuple(tracker.rules)
        absent, key_sets = tuple(tracker.absent_rules), tracker.key_sets
        for violation in violations:
            findings.append(Finding(pol.name, violation, reads, order, found, absent, key_sets))
    return findings


def _check_fields(violation: Violation, fields: Collection[str] | None) -> None:
    if violation.origin_wide and violation.scope:
        raise PolicyError(
            f"suggests {violation.type} origin-wide with scope {dict(violation.scope)!r}; an "
            "origin-wide fix holds for every request of the route, so it has no scope (drop "
            "origin_wide, or the scope)",
            field=next(iter(violation.scope)),
        )
    if fields is None:
        return
    for what, names in (
        ("parameter", violation.parameters),
        ("precondition", violation.precondition),
    ):
        for name in names:
            if name not in fields:
                raise PolicyError(
                    f"suggests {violation.type} with {what} {name!r}, which is not a field of "
                    f"the request (fields: {', '.join(sorted(fields))})",
                    field=name,
                )
