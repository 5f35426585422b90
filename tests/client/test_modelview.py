"""What the model is shown of a response: the body without its contract metadata."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.client.modelview import SUGGESTION_MEMBERS, model_text, model_view
from invalidation_contracts.domains import get_catalog
from invalidation_contracts.protocol.wirecost import ENVELOPE_FIELDS, SUGGESTION_FIELDS
from invalidation_contracts.server import Provider


def _acme_problem() -> dict[str, Any]:
    catalog = get_catalog("acme_billing")
    draft = catalog.family("governed-partner-growth").draft()
    return Provider(catalog.domain).handle(catalog.route, draft).body.to_wire()


def test_the_envelope_stamps_are_removed_and_the_problem_stays():
    body = _acme_problem()

    seen = model_view(body)

    assert not set(ENVELOPE_FIELDS) & set(seen)
    assert {k: seen[k] for k in ("type", "title", "status", "detail")} == {
        k: body[k] for k in ("type", "title", "status", "detail")
    }


def test_a_suggestion_keeps_its_type_action_message_and_parameters_only():
    body = _acme_problem()

    (shown,) = model_view(body)["recovery_feedback"]["suggestions"]
    (raw,) = body["recovery_feedback"]["suggestions"]

    assert shown == {name: raw[name] for name in SUGGESTION_MEMBERS}
    assert not set(SUGGESTION_FIELDS) & set(shown) and "patch" not in shown


def test_the_raw_body_is_left_whole_for_the_memory():
    body = _acme_problem()
    before = copy.deepcopy(body)

    model_view(body)

    assert body == before


def test_the_model_text_is_shorter_than_the_body_by_the_contract():
    body = _acme_problem()

    text = model_text(body)

    assert len(text) < len(json.dumps(body, sort_keys=True, ensure_ascii=False)) / 2
    assert "table_versions" not in text and "SUMMERSALE25" in text


json_leaf = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)
member = st.sampled_from([*SUGGESTION_MEMBERS, *SUGGESTION_FIELDS, "patch", "other"])
suggestion = st.dictionaries(member, json_value, max_size=6) | json_value
body_strategy = st.fixed_dictionaries(
    {},
    optional={
        **{name: json_value for name in ENVELOPE_FIELDS},
        "detail": json_value,
        "recovery_feedback": st.fixed_dictionaries(
            {}, optional={"suggestions": st.lists(suggestion, max_size=3) | json_value}
        )
        | json_value,
    },
)


@settings(max_examples=150, deadline=None)
@given(body_strategy)
def test_any_body_is_shown_without_contract_members_and_the_view_is_idempotent(body):
    seen = model_view(body)

    assert not set(ENVELOPE_FIELDS) & set(seen)
    assert {k: v for k, v in body.items() if k not in ENVELOPE_FIELDS}.keys() == seen.keys()
    feedback = seen.get("recovery_feedback")
    if isinstance(feedback, dict) and isinstance(feedback.get("suggestions"), list):
        for item in feedback["suggestions"]:
            assert not isinstance(item, dict) or set(item) <= set(SUGGESTION_MEMBERS)
    assert model_view(seen) == seen


def test_a_detail_that_only_joins_the_messages_is_dropped_for_hosts():
    body = _acme_problem()

    seen = model_view(body, joined_detail=False)

    assert "detail" not in seen and seen["title"] == body["title"]
    assert [s["message"] for s in seen["recovery_feedback"]["suggestions"]] == [
        s["message"] for s in body["recovery_feedback"]["suggestions"]
    ]


def test_a_detail_that_says_more_than_the_messages_is_kept_for_hosts():
    body = {**_acme_problem(), "detail": "the plan is closed to new customers"}

    assert model_view(body, joined_detail=False)["detail"] == body["detail"]
