"""Consumption levels: the system prompt and the memory block, pinned byte for byte by golden files.

Regenerate the golden files after an intended change with ``UPDATE_GOLDEN=1 pytest tests/client``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.prompting import (
    L2_SENTENCE,
    consumption,
    render_memory_block,
    system_prompt,
)
from invalidation_contracts.client.values import Observed
from invalidation_contracts.protocol import Suggestion

GOLDEN = Path(__file__).parent / "golden"
BASE = "You plan requests for the Acme billing API."

FIXES = [
    Suggestion.model_validate(s)
    for s in (
        {
            "type": "ADD_REQUIRED_PROMO_CODE",
            "parameters": {"promo_code": "SUMMERSALE25"},
            "action": "add_field",
            "cache_hint": "cacheable",
            "scope": {"plan": "enterprise_annual"},
            "message": "Enterprise annual plans need the CSM-assigned promo code.",
        },
        {
            "type": "USE_REQUIRED_FUNDING_TYPE",
            "parameters": {"payment_method_token": "acme_pm_visa_credit"},
            "action": "conditional_rewrite",
            "cache_hint": "cacheable",
            "patch": [
                {"op": "test", "path": "/funding_type", "value": "debit"},
                {"op": "replace", "path": "/payment_method_token", "value": "acme_pm_visa_credit"},
            ],
        },
        {
            "type": "USE_GLUTEN_FREE_BRAND",
            "parameters": {"brand": "Schär", "substitutions": {"flour": "rice"}},
            "action": "rewrite_value",
            "cache_hint": "cacheable",
        },
    )
]
DRAFT = {
    "plan": "enterprise_annual",
    "payment_method_token": "acme_pm_visa_debit",
    "brand": "Schär",
}


def assert_golden(name: str, text: str) -> None:
    """``text`` equals the golden file (which ends with one newline more than the text)."""
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text + "\n", encoding="utf-8")
    assert text + "\n" == path.read_text(encoding="utf-8")


@pytest.mark.parametrize("level", [2, 3, 4, 6])
def test_the_l2_sentence_is_appended_to_the_system_prompt_from_l2_up(level):
    assert system_prompt(BASE, level) == f"{BASE}\n\n{L2_SENTENCE}"


@pytest.mark.parametrize("level", [0, 1])
def test_below_l2_the_system_prompt_is_left_as_it_is(level):
    assert system_prompt(BASE, level) == BASE


def test_the_l2_sentence_is_not_appended_twice():
    once = system_prompt(BASE, 3)

    assert system_prompt(once, 3) == once


def test_the_l2_sentence_text_is_the_papers():
    assert L2_SENTENCE == (
        "Merge the suggestion parameters into your next request verbatim; "
        "do not paraphrase or omit fields."
    )


def test_l2_memory_block_lists_the_fixes_as_instructions():
    assert_golden("l2_instructions.txt", render_memory_block(FIXES, "L2"))


def test_l1_memory_block_is_the_same_instruction_list():
    assert render_memory_block(FIXES, 1) == render_memory_block(FIXES, 2)


def test_l3_memory_block_presents_the_fixes_as_amended_input():
    assert_golden("l3_amended.txt", render_memory_block(FIXES, "L3"))


def test_l3_memory_block_says_what_each_amendment_changes_in_the_draft():
    assert_golden("l3_amended_draft.txt", render_memory_block(FIXES, 3, DRAFT))


def test_wire_levels_above_l3_consume_as_l3():
    assert render_memory_block(FIXES, 6, DRAFT) == render_memory_block(FIXES, 3, DRAFT)


def test_no_fixes_render_no_block():
    assert render_memory_block([], 3) == ""


def test_rendering_is_deterministic_whatever_the_parameter_order():
    shuffled = FIXES[2].model_copy(
        update={"parameters": {"substitutions": {"flour": "rice"}, "brand": "Schär"}}
    )

    assert render_memory_block([shuffled], 3) == render_memory_block([FIXES[2]], 3)


def test_memory_entries_render_as_their_suggestions(server):
    memory = FixMemory("row")
    wire = [fix.model_dump(mode="json", exclude_none=True) for fix in FIXES[:1]]
    memory.observe(server.url, Observed(None, 422, server.failure(*wire)))

    assert render_memory_block(memory.entries(server.url), 3) == render_memory_block(FIXES[:1], 3)


def test_consumption_fills_the_planning_context_fields_at_l3():
    out = consumption(BASE, FIXES, 3, DRAFT)

    assert out.system_prompt == system_prompt(BASE, 3)
    assert out.memory_block == render_memory_block(FIXES, 3, DRAFT)
    assert out.memory == tuple(FIXES) and out.amended_input is True


def test_consumption_without_fixes_is_not_amended_input():
    assert consumption(BASE, [], 3).amended_input is False
