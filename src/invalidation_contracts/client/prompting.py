"""Consumption levels L2 and L3: what the client puts in front of the planner (paper §3.4).

Pure functions from memory to prompt text, deterministic byte for byte (the golden tests pin them):

- L2 adds ``L2_SENTENCE`` to the system prompt; the memory block is an instruction list of fixes.
- L3 keeps the sentence and presents each fix as an amendment already applied to the task input,
  so the planner reads one description of the request rather than a request plus a correction;
  without a draft (nothing to apply it to yet) the block says the values are still to be put in.

Levels above L3 are wire levels and consume as L3 (L3 subsumes L2). Below L2 the block is the same
instruction list, without the sentence.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..protocol.levels import Level
from ..protocol.models import Action, Suggestion
from .entries import MemoryEntry

#: The Level 2 sentence added to the system prompt (SPEC §2, paper §3.4).
L2_SENTENCE = (
    "Merge the suggestion parameters into your next request verbatim; do not paraphrase or omit "
    "fields."
)

INSTRUCTION_HEADER = "Previously learned fixes for this API (apply each one whose condition holds):"
AMENDED_HEADER = "Amended input (already applied; send these values as they are):"
#: L3 before the model has drafted anything (a framework's instructions): nothing is applied yet.
DRAFTLESS_HEADER = (
    "Amended input (not applied yet; put these values in your request when their condition holds):"
)

_VERBS = {
    Action.ADD_FIELD: "add parameters {} to the request",
    Action.REWRITE_VALUE: "replace the request's values with parameters {}",
    Action.CONDITIONAL_REWRITE: "replace the request's values with parameters {}",
}

Fix = MemoryEntry | Suggestion


def system_prompt(base: str, level: Level | int | str) -> str:
    """``base`` with the L2 sentence appended at L2 and above (once, on its own paragraph)."""
    base = base.rstrip()
    if Level.parse(level) < Level.PATCH_PROTOCOL or L2_SENTENCE in base:
        return base
    return f"{base}\n\n{L2_SENTENCE}" if base else L2_SENTENCE


def amended(level: Level | int | str) -> bool:
    """Whether fixes are presented as amended input at this level (L3 and above)."""
    return Level.parse(level) >= Level.AMENDED_INPUT


def render_memory_block(
    fixes: Sequence[Fix], level: Level | int | str, draft: Mapping[str, Any] | None = None
) -> str:
    """The memory block for ``fixes`` (entries or suggestions), in their order; ``""`` for none.

    At L3+ with a ``draft`` (the task's request values), each amended field says whether it was
    added or what it replaces; without one, the block says nothing is applied yet (it is true
    for a prompt written before the model drafts a call).
    """
    suggestions = memory_suggestions(fixes)
    if not suggestions:
        return ""
    if amended(level):
        return _amended_block(suggestions, draft)
    return _instruction_block(suggestions)


def memory_suggestions(fixes: Sequence[Fix]) -> tuple[Suggestion, ...]:
    """The suggestions behind ``fixes``, in order (what ``PlanningContext.memory`` carries)."""
    return tuple(fix.suggestion if isinstance(fix, MemoryEntry) else fix for fix in fixes)


@dataclass(frozen=True, slots=True)
class Consumption:
    """The planner-facing rendering of a memory: the ``PlanningContext`` fields it fills."""

    system_prompt: str
    memory_block: str
    memory: tuple[Suggestion, ...]
    amended_input: bool


def consumption(
    base_system: str,
    fixes: Sequence[Fix],
    level: Level | int | str,
    draft: Mapping[str, Any] | None = None,
) -> Consumption:
    """System prompt, memory block and structured fixes for one planning call at ``level``."""
    suggestions = memory_suggestions(fixes)
    return Consumption(
        system_prompt=system_prompt(base_system, level),
        memory_block=render_memory_block(suggestions, level, draft),
        memory=suggestions,
        amended_input=bool(suggestions) and amended(level),
    )


def _instruction_block(suggestions: Sequence[Suggestion]) -> str:
    lines = [INSTRUCTION_HEADER]
    for number, s in enumerate(suggestions, 1):
        line = f"{number}. {s.type}: " + _VERBS[s.action].format(_json(s.parameters))
        condition = _condition(s)
        if condition:
            line += f" when {condition}"
        line += "."
        if s.message:
            line += f" Reason: {s.message.strip()}"
        lines.append(line)
    return "\n".join(lines)


def _amended_block(suggestions: Sequence[Suggestion], draft: Mapping[str, Any] | None) -> str:
    lines = [AMENDED_HEADER if draft is not None else DRAFTLESS_HEADER]
    for s in suggestions:
        condition = _condition(s)
        for name in sorted(s.parameters):
            value = s.parameters[name]
            notes = []
            if draft is not None:
                if name not in draft:
                    notes.append("added")
                elif _json(draft[name]) == _json(value):
                    notes.append("unchanged")
                else:
                    notes.append(f"replaces {_json(draft[name])}")
            notes.append(f"from {s.type}")
            if condition:
                notes.append(f"when {condition}")
            lines.append(f"- {name} = {_json(value)} ({'; '.join(notes)})")
    return "\n".join(lines)


def _condition(s: Suggestion) -> str:
    """The scope and the patch's ``test`` preconditions, as ``field is value`` clauses."""
    clauses = [f"{name} is {_json(value)}" for name, value in sorted((s.scope or {}).items())]
    for op in s.patch or ():
        if op.op == "test":
            clauses.append(f"{_field(op.path)} is {_json(op.value)}")
    return " and ".join(dict.fromkeys(clauses))


def _field(pointer: str) -> str:
    parts = pointer.split("/")[1:]
    if len(parts) == 1:
        return parts[0].replace("~1", "/").replace("~0", "~")
    return pointer


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(", ", ": "))
