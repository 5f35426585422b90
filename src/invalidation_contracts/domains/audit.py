"""Leak audit: no fix value may appear in a task's text, its fields, the system prompt or the
request schema, and the request schema may name no value a task uses.

A planner that reads the fix in its task has not learned it from the server, so a leak silently
inflates first-try rates. The audit collects every parameter value any policy emits, under the
initial state and every drift snapshot and rule set, for each task draft and for the drafts one
field away from it (each string field set to each key or string value the tables hold).

The request's JSON Schema is shown to the planner with every task, so its prose (descriptions,
titles, examples, defaults) is audited too: an example id there is one a small model copies
instead of the task's own value (a request for another customer or plan that still passes).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from invalidation_contracts.server import Provider, RegistryState

from .catalog import DomainCatalog


@dataclass(frozen=True, slots=True)
class Leak:
    """A fix value found where a planner can read it."""

    value: object
    where: str
    kind: str = "fix value"
    """``fix value`` (a policy emits it) or ``task value`` (a task family states it)."""

    def __str__(self) -> str:
        return f"{self.kind} {self.value!r} appears in {self.where}"


#: JSON Schema keywords whose values are prose or sample values a planner reads as hints.
SCHEMA_PROSE_KEYWORDS = frozenset({"description", "title", "examples", "example", "default"})


def audit(catalog: DomainCatalog) -> list[Leak]:
    """Every place a fix value appears in the system prompt, the request schema or a task family's
    text or fields, and every task value the request schema's prose names."""
    values = fix_values(catalog)
    found = [
        Leak(v, "the system prompt")
        for v in sorted(values, key=repr)
        if _in_text(v, catalog.system_prompt)
    ]
    found += [
        Leak(v, f"the system prompt of route {path}")
        for path, text in catalog.route_prompts.items()
        for v in sorted(values, key=repr)
        if _in_text(v, text)
    ]
    found += schema_leaks(catalog, values)
    for family in catalog.task_families.values():
        for value in sorted(values, key=repr):
            if _in_text(value, family.text):
                found.append(Leak(value, f"the text of task family {family.id}"))
            if any(_same(value, leaf) for leaf in _leaves(family.fields)):
                found.append(Leak(value, f"the fields of task family {family.id}"))
    return found


def request_schema(catalog: DomainCatalog, route: str | None = None) -> dict[str, Any]:
    """The JSON Schema of the request body of ``route`` (a path; the default route when None),
    exactly as the harness shows it to a planner."""
    chosen = catalog.route if route is None else catalog.routes[route]
    schema: dict[str, Any] = chosen.request_model.model_json_schema()
    return schema


def schema_leaks(catalog: DomainCatalog, fix_values: set[Any]) -> list[Leak]:
    """Fix values anywhere in a route's request schema (prose, enums or consts), and task values
    in its prose: each is a value a planner could copy from the schema instead of its task."""
    found: list[Leak] = []
    for path in catalog.routes:
        where = "the request schema" if path == catalog.route.path else f"the schema of {path}"
        found += _route_schema_leaks(catalog, fix_values, path, where)
    return found


def _route_schema_leaks(
    catalog: DomainCatalog, fix_values: set[Any], route: str, where: str
) -> list[Leak]:
    schema = request_schema(catalog, route)
    prose = " \n ".join(str(v) for v in _schema_leaves(schema, SCHEMA_PROSE_KEYWORDS))
    constraints = " \n ".join(str(v) for v in _schema_leaves(schema, frozenset({"enum", "const"})))
    found = [
        Leak(value, where)
        for value in sorted(fix_values, key=repr)
        if _in_text(value, prose) or _in_text(value, constraints)
    ]
    task_values = {
        leaf
        for family in catalog.task_families.values()
        for leaf in _leaves(family.fields)
        if isinstance(leaf, str) and leaf not in fix_values
    }
    found += [
        Leak(value, where, kind="task value")
        for value in sorted(task_values)
        if _in_text(value, prose)
    ]
    return found


def fix_values(catalog: DomainCatalog) -> set[Any]:
    """Every non-null parameter value a policy emits on the drafts the audit explores."""
    provider = Provider(catalog.domain)
    candidates = sorted(_table_strings(catalog))
    values: set[Any] = set()
    for state in _states(catalog):
        for family in catalog.task_families.values():
            route = catalog.route_of(family)
            for draft in _neighbours(family.draft(), candidates):
                try:
                    findings = provider.findings(route, draft, state)
                except ValidationError:
                    continue
                for finding in findings:
                    values.update(v for v in _leaves(finding.violation.parameters) if v is not None)
                    if finding.violation.parameters and draft == family.fields:
                        chained = {**draft, **finding.violation.parameters}
                        try:
                            more = provider.findings(route, chained, state)
                        except ValidationError:
                            continue
                        for f in more:
                            values.update(
                                v for v in _leaves(f.violation.parameters) if v is not None
                            )
    return values


def _states(catalog: DomainCatalog) -> Iterator[RegistryState]:
    """The initial state, each snapshot and rule set applied alone, and every snapshot in turn."""
    yield catalog.domain.registry().state
    for name in catalog.snapshots:
        registry = catalog.domain.registry()
        file = catalog.read_snapshot(name)
        registry.reload(file.table, file.rows, file.version)
        yield registry.state
    for name in catalog.rule_sets:
        registry = catalog.domain.registry()
        registry.set_rules(catalog.read_rule_set(name))
        yield registry.state
    cumulative = catalog.domain.registry()
    for name in sorted(catalog.snapshots):
        file = catalog.read_snapshot(name)
        cumulative.reload(file.table, file.rows)
    yield cumulative.state


def _table_strings(catalog: DomainCatalog) -> set[str]:
    rows = [spec.rows for spec in catalog.domain.memory_tables.values()]
    rows += [catalog.read_snapshot(name).rows for name in catalog.snapshots]
    found: set[str] = set()
    for table in rows:
        found.update(table)
        found.update(v for row in table.values() for v in _leaves(row) if isinstance(v, str))
    return found


def _neighbours(draft: dict[str, Any], candidates: list[str]) -> Iterator[dict[str, Any]]:
    yield draft
    for field, value in draft.items():
        if isinstance(value, str) or value is None:
            for candidate in candidates:
                if candidate != value:
                    yield {**draft, field: candidate}


def _schema_leaves(schema: object, keywords: frozenset[str]) -> Iterator[Any]:
    """The leaf values under ``keywords`` anywhere in a JSON Schema (not property names)."""
    if isinstance(schema, Mapping):
        for key, value in schema.items():
            if key in keywords:
                yield from _leaves(value)
            elif key == "properties" and isinstance(value, Mapping):
                for subschema in value.values():
                    yield from _schema_leaves(subschema, keywords)
            else:
                yield from _schema_leaves(value, keywords)
    elif isinstance(schema, list):
        for item in schema:
            yield from _schema_leaves(item, keywords)


def _leaves(value: object) -> Iterator[Any]:
    if isinstance(value, Mapping):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


def _same(value: object, leaf: object) -> bool:
    if isinstance(value, str) and isinstance(leaf, str):
        return value.casefold() == leaf.casefold()
    return type(value) is type(leaf) and value == leaf


def _in_text(value: object, text: str) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return re.search(rf"(?<![\d.]){re.escape(str(value))}(?![\d])", text) is not None
    if isinstance(value, str) and value:
        folded = text.casefold()
        return any(
            _whole(form.casefold(), folded)
            for form in dict.fromkeys((value, value.replace("_", " ")))
        )
    return False


def _whole(value: str, text: str) -> bool:
    """``value`` occurs in ``text`` as a whole value: not inside a longer word, code or id
    (``PROMO`` is not in ``PROMO25``, ``pm_visa`` not in ``acme_pm_visa_credit``)."""
    return re.search(rf"(?<![\w-]){re.escape(value)}(?![\w-])", text) is not None
