"""What a real model is shown for one attempt, rendered once for every planner.

Both vendor adapters send exactly this text, and the simulated profiles estimate their token usage
from it, so a simulated and a real run of the same context are billed on the same prompt. Earlier
responses are shown as the model sees them (``client.modelview``): without the contract's
metadata, which is for the memory and would only be billed as input tokens.
``contract_tokens`` estimates what showing it would have cost.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from ..client.modelview import model_view
from .base import PlanningContext

#: The closing instruction of every prompt; the schema follows it.
ANSWER_INSTRUCTION = (
    "Answer with the request body only: one JSON object that matches the JSON Schema below. "
    "Do not add prose or explanations."
)


@dataclass(frozen=True, slots=True)
class RenderedPrompt:
    """The system text and the user text of one planning call."""

    system: str
    user: str


def render_prompt(context: PlanningContext, *, with_contract: bool = False) -> RenderedPrompt:
    """Render ``context`` as the (system, user) text a model receives.

    The user text holds the task, the memory block verbatim, each earlier attempt as its request
    JSON and response JSON (its model view: no contract metadata), and the instruction to answer
    with a body matching ``request_schema``. ``with_contract`` renders the responses whole, as
    received: the prompt a client that showed the contract would send (for measuring its cost).
    """
    sections = [f"Task:\n{context.task.strip()}"]
    if context.memory_block.strip():
        sections.append(context.memory_block.strip())
    for number, attempt in enumerate(context.attempts, start=1):
        sections.append(
            f"Attempt {number} request:\n{_json(attempt.request)}\n"
            f"Attempt {number} response (HTTP {attempt.status}):\n"
            f"{_json(attempt.response if with_contract else model_view(attempt.response))}"
        )
    sections.append(f"{ANSWER_INSTRUCTION}\n{_json(context.request_schema)}")
    return RenderedPrompt(system=context.system_prompt.strip(), user="\n\n".join(sections))


def contract_tokens(context: PlanningContext) -> int:
    """Estimated input tokens the contract metadata of ``context``'s responses would add to its
    prompt (``estimate_tokens`` of both renderings; 0 without earlier attempts)."""
    if not context.attempts:
        return 0
    shown, whole = render_prompt(context), render_prompt(context, with_contract=True)
    return estimate_tokens(whole.user) - estimate_tokens(shown.user)


def render_output(request: dict[str, Any]) -> str:
    """The text of an answer that is exactly ``request``: what a simulated planner 'writes'."""
    return _json(request)


def estimate_tokens(text: str) -> int:
    """A deterministic token estimate: one token per four characters, rounded up.

    Only for planners no vendor bills; the figure is always reported with ``estimated=True``.
    """
    return math.ceil(len(text) / 4)


def _json(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)
