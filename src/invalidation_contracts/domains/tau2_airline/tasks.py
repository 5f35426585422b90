"""Task families from τ²'s own airline task set: each is the tool call τ²'s evaluation expects of
one task, loaded from the installed package, with the departure ``families.toml`` declares."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from invalidation_contracts.protocol import Action
from invalidation_contracts.server import DataFileError, read_data

from ..catalog import TaskFamily
from .source import airline_tasks

FAMILIES = Path(__file__).with_name("families.toml")

SYSTEM_PROMPT = """You are an airline agent. You change reservations by calling τ²-bench's airline
tools, served as HTTP routes (POST /v1/airline/<tool>). Reply with only the JSON request body of
the route the task names, with the values the task states. If the API refuses a request, its
response explains why and may suggest changes; use them to build the next request."""


def route_path(tool: str) -> str:
    """The route serving τ²'s ``tool``."""
    return f"/v1/airline/{tool}"


def expected_call(task: Any, tool: str, index: int = 0) -> dict[str, Any]:
    """The arguments of the ``index``-th ``tool`` call τ²'s evaluation expects of ``task``."""
    calls = [a for a in task.evaluation_criteria.actions or () if a.name == tool]
    if index >= len(calls):
        raise DataFileError(
            f"τ² airline task {task.id!r} expects {len(calls)} {tool} call(s), not #{index + 1}"
        )
    arguments: dict[str, Any] = json.loads(json.dumps(calls[index].arguments))
    return arguments


def _text(task: Any, tool: str, fields: Mapping[str, Any]) -> str:
    known = " ".join(str(task.user_scenario.instructions.known_info or "").split())
    stated = ", ".join(f"{k} {json.dumps(v)}" for k, v in fields.items())
    return f"{known} Call {tool} with {stated}.".strip()


def load_families(path: Path = FAMILIES) -> dict[str, TaskFamily]:
    """The families of ``families.toml``, their drafts filled from τ²'s task set."""
    data = read_data(path, "TOML")
    tasks = airline_tasks()
    families: dict[str, TaskFamily] = {}
    for index, item in enumerate(data.get("family", [])):
        where = f"{path}: family #{index + 1}"
        try:
            task = tasks[str(item["task"])]
        except KeyError as exc:
            raise DataFileError(f"{where}: no τ² airline task {exc.args[0]!r}") from None
        tool = str(item["tool"])
        fields = {**expected_call(task, tool, int(item.get("call", 0))), **item.get("set", {})}
        fix_type = item.get("expected_fix_type")
        family = TaskFamily(
            id=str(item["id"]),
            klass=str(item["class"]),
            text=_text(task, tool, fields),
            fields=MappingProxyType(fields),
            action=Action.REWRITE_VALUE if fix_type else None,
            expected_fix_type=fix_type,
            description=" ".join(str(item.get("description", "")).split()),
            route=route_path(tool),
        )
        if family.id in families:
            raise DataFileError(f"{where}: task family {family.id!r} is defined twice")
        families[family.id] = family
    return families


__all__ = ["FAMILIES", "SYSTEM_PROMPT", "expected_call", "load_families", "route_path"]
