"""The one prompt rendering every planner shares."""

from __future__ import annotations

import json

from invalidation_contracts.planners import Attempt, PlanningContext, estimate_tokens, render_prompt
from invalidation_contracts.planners.rendering import ANSWER_INSTRUCTION

SCHEMA = {"type": "object", "properties": {"plan": {"type": "string"}}}
REQUEST = {"plan": "pro"}
RESPONSE = {"status": 422, "recovery_feedback": {"suggestions": []}}
CONTEXT = PlanningContext(
    system_prompt="You plan request bodies.",
    task="Subscribe to the pro plan.",
    task_fields={"plan": "pro"},
    request_schema=SCHEMA,
    memory_block="Already applied to your input: promo_code = P-1",
    attempts=(Attempt(request=REQUEST, status=422, response=RESPONSE),),
)


def test_system_text_is_the_system_prompt():
    assert render_prompt(CONTEXT).system == "You plan request bodies."


def test_user_text_holds_task_memory_attempts_and_schema_in_order():
    user = render_prompt(CONTEXT).user
    parts = [
        CONTEXT.task,
        CONTEXT.memory_block,
        json.dumps(REQUEST, sort_keys=True),
        "HTTP 422",
        json.dumps(RESPONSE, sort_keys=True),
        ANSWER_INSTRUCTION,
        json.dumps(SCHEMA, sort_keys=True),
    ]
    positions = [user.index(part) for part in parts]
    assert positions == sorted(positions)


def test_empty_memory_block_adds_no_section():
    bare = PlanningContext("s", "Do it.", {}, SCHEMA)
    assert render_prompt(bare).user.split("\n\n")[0] == "Task:\nDo it."
    assert len(render_prompt(bare).user.split("\n\n")) == 2


def test_rendering_is_deterministic_whatever_the_key_order():
    shuffled = PlanningContext("s", "t", {}, dict(reversed(list(SCHEMA.items()))))
    ordered = PlanningContext("s", "t", {}, SCHEMA)
    assert render_prompt(shuffled) == render_prompt(ordered)


def test_token_estimate_is_a_quarter_of_the_characters_rounded_up():
    assert [estimate_tokens(t) for t in ("", "abc", "abcd", "abcde")] == [0, 1, 1, 2]
