"""What a harness needs besides the API itself: task families, drift snapshots, prompt, oracle.

A domain package ships its tables, rules, snapshots and tasks as data files; the loaders here turn
them into a :class:`DomainCatalog`. They use only the provider's public API, so a third domain is
built the same way (see ``docs/providers.md``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from invalidation_contracts.protocol import Action, RuleDeclaration, Suggestion, canonical_json
from invalidation_contracts.server import (
    DataFileError,
    Domain,
    RegistryState,
    Route,
    Rule,
    SnapshotFile,
    TableSpec,
    current_fix,
    read_data,
    read_snapshot,
)

SNAPSHOT_SUFFIXES = (".json", ".toml")


@dataclass(frozen=True, slots=True)
class TaskFamily:
    """One kind of task a planner is given: what a user writes, and the draft it states.

    ``fields`` are the request values the text states (the planner's starting draft); they never
    hold the fix. ``action`` and ``expected_fix_type`` describe the hint the draft draws on a first
    try without memory (both None for a class that carries no constraint). ``route`` is the path of
    the route the family's requests go to; None means the catalog's default route.
    """

    id: str
    klass: str
    text: str
    fields: Mapping[str, Any]
    action: Action | None = None
    expected_fix_type: str | None = None
    description: str = ""
    route: str | None = None

    def draft(self) -> dict[str, Any]:
        """A fresh, mutable copy of ``fields``."""
        return copy.deepcopy(dict(self.fields))


@dataclass(frozen=True, eq=False)
class DomainCatalog:
    """A domain with everything a harness drives it with.

    ``snapshots`` maps a drift snapshot's name to its table file (its ``table`` field says which
    table it replaces); ``rule_sets`` maps a name to a file of complete rule declarations (what
    ``POST /admin/rules`` takes). ``route`` is the default endpoint: the one a task family that
    names no route calls. ``routes`` maps every route a family may name by its path (the default
    route is always among them, and wins over a route given there under its path); a family naming a
    path not in it is a ``ValueError``.
    ``route_prompts`` adds, per route path, a paragraph to the system prompt of that route's
    families (what the endpoint does); the default route's families see ``system_prompt`` alone
    unless their path has one too.
    """

    domain: Domain
    system_prompt: str
    task_families: Mapping[str, TaskFamily]
    snapshots: Mapping[str, Path]
    route: Route[Any]
    rule_sets: Mapping[str, Path] = field(default_factory=dict)
    routes: Mapping[str, Route[Any]] = field(default_factory=dict)
    route_prompts: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_directory(
        cls,
        domain: Domain,
        directory: Path,
        route_path: str,
        rule_sets: Mapping[str, Path] | None = None,
    ) -> DomainCatalog:
        """A catalog laid out as the shipped domains are: ``tasks.toml``, ``snapshots/``,
        ``rules/``.

        Every rule set under ``rules/`` is loaded by its file stem (``rules/rule-removal.json`` is
        the rule set ``rule-removal``); ``rule_sets`` adds names or points one elsewhere (e.g.
        ``{"initial": rules/rules-stream.json}`` for a domain that starts from another set).
        ``route_path`` is the default route; a family's ``route`` and the ``[routes."<path>"]``
        tables of ``tasks.toml`` name the others, each one of ``domain``'s routes.
        """
        directory = Path(directory)
        path = directory / "tasks.toml"
        tasks = load_tasks(path)
        named = [route_path, *tasks.route_prompts]
        named += [f.route for f in tasks.families.values() if f.route is not None]
        routes: dict[str, Route[Any]] = {}
        for name in dict.fromkeys(named):
            try:
                routes[name] = domain.route(name)
            except KeyError:
                known = ", ".join(r.path for r in domain.routes)
                raise DataFileError(
                    f"{path}: route {name!r} is not a route of domain {domain.name!r} "
                    f"(routes: {known})"
                ) from None
        return cls(
            domain=domain,
            system_prompt=tasks.system_prompt,
            task_families=tasks.families,
            snapshots=snapshot_paths(directory / "snapshots"),
            route=routes[route_path],
            rule_sets={**rule_set_paths(directory / "rules"), **dict(rule_sets or {})},
            routes=routes,
            route_prompts=tasks.route_prompts,
        )

    def __post_init__(self) -> None:
        object.__setattr__(self, "task_families", MappingProxyType(dict(self.task_families)))
        object.__setattr__(self, "snapshots", MappingProxyType(dict(self.snapshots)))
        object.__setattr__(self, "rule_sets", MappingProxyType(dict(self.rule_sets)))
        routes = {self.route.path: self.route}
        routes.update((p, r) for p, r in self.routes.items() if p != self.route.path)
        object.__setattr__(self, "routes", MappingProxyType(routes))
        object.__setattr__(self, "route_prompts", MappingProxyType(dict(self.route_prompts)))
        known = ", ".join(sorted(routes))
        for family in self.task_families.values():
            if family.route is not None and family.route not in routes:
                raise ValueError(
                    f"task family {family.id!r} names route {family.route!r}, which catalog "
                    f"{self.domain.name!r} does not have (routes: {known})"
                )
        for path in self.route_prompts:
            if path not in routes:
                raise ValueError(
                    f"a system prompt is given for route {path!r}, which catalog "
                    f"{self.domain.name!r} does not have (routes: {known})"
                )

    @property
    def name(self) -> str:
        return self.domain.name

    def family(self, family_id: str) -> TaskFamily:
        """The task family ``family_id``; KeyError naming the known ones otherwise."""
        try:
            return self.task_families[family_id]
        except KeyError:
            known = ", ".join(sorted(self.task_families))
            raise KeyError(
                f"domain {self.name!r} has no task family {family_id!r}; known: {known}"
            ) from None

    def route_of(self, family: TaskFamily | str) -> Route[Any]:
        """The route ``family`` (a family or its id) sends its requests to."""
        if isinstance(family, str):
            family = self.family(family)
        return self.route if family.route is None else self.routes[family.route]

    def system_prompt_of(self, family: TaskFamily | str) -> str:
        """The base system prompt a planner gets for ``family``: the catalog's, then its route's
        paragraph when ``route_prompts`` has one."""
        extra = self.route_prompts.get(self.route_of(family).path)
        return self.system_prompt if extra is None else f"{self.system_prompt}\n\n{extra}"

    def families_of(self, klass: str) -> list[TaskFamily]:
        """The families of one class, in declaration order."""
        return [f for f in self.task_families.values() if f.klass == klass]

    def read_snapshot(self, name: str) -> SnapshotFile:
        """The drift snapshot ``name`` as a table file."""
        try:
            path = self.snapshots[name]
        except KeyError:
            known = ", ".join(sorted(self.snapshots))
            raise KeyError(
                f"domain {self.name!r} has no snapshot {name!r}; known: {known}"
            ) from None
        return read_snapshot(path)

    def read_rule_set(self, name: str) -> tuple[Rule, ...]:
        """The rule declaration set ``name``."""
        try:
            path = self.rule_sets[name]
        except KeyError:
            known = ", ".join(sorted(self.rule_sets)) or "none"
            raise KeyError(
                f"domain {self.name!r} has no rule set {name!r}; known: {known}"
            ) from None
        return load_rules(path)

    def is_fix_current(
        self,
        fix: Suggestion,
        draft: Mapping[str, Any],
        state: RegistryState,
        route: Route[Any] | None = None,
    ) -> bool:
        """Evaluator oracle: would the server still give ``fix`` for ``draft`` under ``state``?

        ``draft`` is the request the fix was learned on (the task's fields), before the fix;
        ``route`` the route it was sent to (the default route when None).
        """
        return is_fix_current(route or self.route, draft, fix, state)


def is_fix_current(
    route: Route[Any], draft: Mapping[str, Any], fix: Suggestion, state: RegistryState
) -> bool:
    """Evaluator ground truth: re-running the policies on ``draft`` against ``state`` yields the
    same fix (never consulted by a client strategy; the harness labels evictions and injections
    with it)."""
    current = current_fix(route, draft, fix.type, fix.scope, state)
    return current is not None and canonical_json(current) == canonical_json(dict(fix.parameters))


def load_tables(directory: Path) -> dict[str, TableSpec]:
    """Every table file in ``directory``, by the table it names; a version left out is ``1.0.0``."""
    tables: dict[str, TableSpec] = {}
    paths = sorted(p for p in Path(directory).iterdir() if p.suffix in SNAPSHOT_SUFFIXES)
    if not paths:
        raise DataFileError(f"{directory}: no table files (*.json, *.toml)")
    for path in paths:
        snapshot = read_snapshot(path)
        if snapshot.table in tables:
            raise DataFileError(f"{path}: table {snapshot.table!r} is defined twice")
        tables[snapshot.table] = TableSpec(snapshot.rows, snapshot.version or "1.0.0")
    return tables


def snapshot_paths(directory: Path) -> dict[str, Path]:
    """The snapshot files in ``directory``, named by file stem (``active_csm_codes.rotation-1``)."""
    directory = Path(directory)
    if not directory.is_dir():
        return {}
    return {p.stem: p for p in sorted(directory.iterdir()) if p.suffix in SNAPSHOT_SUFFIXES}


def rule_set_paths(directory: Path) -> dict[str, Path]:
    """The rule-set files in ``directory`` (``*.json``), named by file stem."""
    directory = Path(directory)
    if not directory.is_dir():
        return {}
    return {p.stem: p for p in sorted(directory.glob("*.json"))}


def load_rules(path: Path) -> tuple[Rule, ...]:
    """A rule declaration file: ``{"rules": [{from_table, to_table, relation, via?}, ...]}``.

    The object is the body ``POST /admin/rules`` takes; a bare list of declarations is accepted too.
    """
    path = Path(path)
    data = read_data(path, "JSON")
    items = data.get("rules") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise DataFileError(f'{path}: expected {{"rules": [...]}} or a list of rule declarations')
    try:
        return tuple(Rule.from_declaration(RuleDeclaration.model_validate(item)) for item in items)
    except ValidationError as exc:
        raise DataFileError(f"{path}: invalid rule declaration ({exc.errors()[0]['msg']})") from exc


@dataclass(frozen=True, slots=True)
class TaskFile:
    """A ``tasks.toml``: the base system prompt, the task families, and each route's paragraph."""

    system_prompt: str
    families: dict[str, TaskFamily]
    route_prompts: dict[str, str] = field(default_factory=dict)


def load_tasks(path: Path) -> TaskFile:
    """Read ``tasks.toml``: ``system_prompt`` and one ``[[family]]`` table per task family.

    Each family has ``id``, ``class``, ``text``, ``[family.fields]`` and, when the draft draws a
    hint, ``action`` and ``expected_fix_type``; ``route`` (a route path) when it calls another
    route than the catalog's default. ``[routes."<path>"]`` tables may give ``system_prompt``: a
    paragraph added to the system prompt of that route's families.
    """
    path = Path(path)
    data = read_data(path, "TOML")
    prompt = data.get("system_prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise DataFileError(f"{path}: 'system_prompt' must be a non-empty string")
    families: dict[str, TaskFamily] = {}
    for index, item in enumerate(data.get("family", [])):
        family = _family(path, index, item)
        if family.id in families:
            raise DataFileError(f"{path}: task family {family.id!r} is defined twice")
        families[family.id] = family
    if not families:
        raise DataFileError(f"{path}: no [[family]] entries")
    return TaskFile(prompt.strip(), families, _route_prompts(path, data.get("routes", {})))


def _route_prompts(path: Path, routes: object) -> dict[str, str]:
    if not isinstance(routes, dict):
        raise DataFileError(f"{path}: 'routes' must be a table of [routes.\"<path>\"] tables")
    out: dict[str, str] = {}
    for route, item in routes.items():
        text = item.get("system_prompt") if isinstance(item, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise DataFileError(
                f"{path}: routes.{route!r}: 'system_prompt' must be a non-empty string"
            )
        out[route] = text.strip()
    return out


def _family(path: Path, index: int, item: object) -> TaskFamily:
    where = f"{path}: family #{index + 1}"
    if not isinstance(item, dict):
        raise DataFileError(f"{where} must be a table")
    for key in ("id", "class", "text"):
        if not isinstance(item.get(key), str) or not item[key].strip():
            raise DataFileError(f"{where}: {key!r} must be a non-empty string")
    fields = item.get("fields")
    if not isinstance(fields, dict) or not fields:
        raise DataFileError(f"{where} ({item['id']}): 'fields' must be a non-empty table")
    action = item.get("action")
    try:
        parsed = Action(action) if action is not None else None
    except ValueError:
        choices = ", ".join(a.value for a in Action)
        raise DataFileError(
            f"{where} ({item['id']}): action {action!r} is not one of {choices}"
        ) from None
    route = item.get("route")
    if route is not None and (not isinstance(route, str) or not route.startswith("/")):
        raise DataFileError(f"{where} ({item['id']}): 'route' must be a route path like '/v1/x'")
    fix_type = item.get("expected_fix_type")
    if (parsed is None) != (fix_type is None):
        raise DataFileError(
            f"{where} ({item['id']}): give both 'action' and 'expected_fix_type', or neither"
        )
    return TaskFamily(
        id=item["id"],
        klass=item["class"],
        text=" ".join(item["text"].split()),
        fields=MappingProxyType(copy.deepcopy(fields)),
        action=parsed,
        expected_fix_type=fix_type,
        description=" ".join(str(item.get("description", "")).split()),
        route=route,
    )
