"""What a harness needs besides the API itself: task families, drift snapshots, prompt, oracle.

A domain package ships its tables, rules, snapshots and tasks as data files; the loaders here turn
them into a :class:`DomainCatalog`. They use only the provider's public API, so a third domain is
built the same way (see ``docs/providers.md``).
"""

from __future__ import annotations

import copy
import json
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from invalidation_contracts.protocol import Action, RuleDeclaration, Suggestion
from invalidation_contracts.server import (
    DataFileError,
    Domain,
    RegistryState,
    Route,
    Rule,
    SnapshotFile,
    TableSpec,
    oracle,
    read_snapshot,
)

SNAPSHOT_SUFFIXES = (".json", ".toml")


@dataclass(frozen=True, slots=True)
class TaskFamily:
    """One kind of task a planner is given: what a user writes, and the draft it states.

    ``fields`` are the request values the text states (the planner's starting draft); they never
    hold the fix. ``action`` and ``expected_fix_type`` describe the hint the draft draws on a first
    try without memory (both None for a class that carries no constraint).
    """

    id: str
    klass: str
    text: str
    fields: Mapping[str, Any]
    action: Action | None = None
    expected_fix_type: str | None = None
    description: str = ""

    def draft(self) -> dict[str, Any]:
        """A fresh, mutable copy of ``fields``."""
        return copy.deepcopy(dict(self.fields))


@dataclass(frozen=True, eq=False)
class DomainCatalog:
    """A domain with everything a harness drives it with.

    ``snapshots`` maps a drift snapshot's name to its table file (its ``table`` field says which
    table it replaces); ``rule_sets`` maps a name to a file of complete rule declarations (what
    ``POST /admin/rules`` takes). ``route`` is the endpoint the task families call.
    """

    domain: Domain
    system_prompt: str
    task_families: Mapping[str, TaskFamily]
    snapshots: Mapping[str, Path]
    route: Route[Any]
    rule_sets: Mapping[str, Path] = field(default_factory=dict)

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
        """
        directory = Path(directory)
        tasks = load_tasks(directory / "tasks.toml")
        return cls(
            domain=domain,
            system_prompt=tasks.system_prompt,
            task_families=tasks.families,
            snapshots=snapshot_paths(directory / "snapshots"),
            route=domain.route(route_path),
            rule_sets={**rule_set_paths(directory / "rules"), **dict(rule_sets or {})},
        )

    def __post_init__(self) -> None:
        object.__setattr__(self, "task_families", MappingProxyType(dict(self.task_families)))
        object.__setattr__(self, "snapshots", MappingProxyType(dict(self.snapshots)))
        object.__setattr__(self, "rule_sets", MappingProxyType(dict(self.rule_sets)))

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
        self, fix: Suggestion, draft: Mapping[str, Any], state: RegistryState
    ) -> bool:
        """Evaluator oracle: would the server still give ``fix`` for ``draft`` under ``state``?

        ``draft`` is the request the fix was learned on (the task's fields), before the fix.
        """
        return oracle.is_fix_current(self.route, draft, fix, state)


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
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DataFileError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except json.JSONDecodeError as exc:
        raise DataFileError(f"{path}: not valid JSON ({exc})") from exc
    items = data.get("rules") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise DataFileError(f'{path}: expected {{"rules": [...]}} or a list of rule declarations')
    try:
        return tuple(Rule.from_declaration(RuleDeclaration.model_validate(item)) for item in items)
    except ValidationError as exc:
        raise DataFileError(f"{path}: invalid rule declaration ({exc.errors()[0]['msg']})") from exc


@dataclass(frozen=True, slots=True)
class TaskFile:
    """A ``tasks.toml``: the base system prompt and the task families."""

    system_prompt: str
    families: dict[str, TaskFamily]


def load_tasks(path: Path) -> TaskFile:
    """Read ``tasks.toml``: ``system_prompt`` and one ``[[family]]`` table per task family.

    Each family has ``id``, ``class``, ``text``, ``[family.fields]`` and, when the draft draws a
    hint, ``action`` and ``expected_fix_type``.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DataFileError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise DataFileError(f"{path}: not valid TOML ({exc})") from exc
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
    return TaskFile(prompt.strip(), families)


def _family(path: Path, index: int, item: Any) -> TaskFamily:
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
    )
