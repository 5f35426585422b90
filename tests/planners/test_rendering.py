"""The one prompt rendering every planner shares."""

from __future__ import annotations

import json

from invalidation_contracts.planners import Attempt, PlanningContext, estimate_tokens, render_prompt
from invalidation_contracts.planners.rendering import ANSWER_INSTRUCTION, contract_tokens

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


def _contract_context() -> PlanningContext:
    """A context whose earlier response is a real Acme problem document, contract and all."""
    from invalidation_contracts.domains import get_catalog
    from invalidation_contracts.server import Provider

    catalog = get_catalog("acme_billing")
    draft = catalog.family("governed-partner-growth").draft()
    body = Provider(catalog.domain).handle(catalog.route, draft).body.to_wire()
    return PlanningContext(
        "s", "t", draft, SCHEMA, attempts=(Attempt(request=draft, status=422, response=body),)
    )


def test_planners_are_shown_no_contract_metadata_but_every_suggestion():
    user = render_prompt(_contract_context()).user

    for member in ("table_versions", "contract_seq", "rules_version", "scope", "patch", "tables"):
        assert f'"{member}"' not in user
    assert "ADD_REQUIRED_PROMO_CODE" in user and "SUMMERSALE25" in user


def test_the_contract_tokens_are_the_difference_the_whole_response_would_make():
    context = _contract_context()
    whole = render_prompt(context, with_contract=True).user

    hidden = contract_tokens(context)

    assert '"table_versions"' in whole
    assert hidden == estimate_tokens(whole) - estimate_tokens(render_prompt(context).user) > 0


def test_without_earlier_responses_no_contract_tokens_are_hidden():
    assert contract_tokens(PlanningContext("s", "t", {}, SCHEMA)) == 0
