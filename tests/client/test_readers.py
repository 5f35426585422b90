"""Suggestion readers (issue 37): a failure in another shape than ``recovery_feedback`` is read
as suggestions by a pluggable reader; what it cannot make deterministic is not stored, with a
reason."""

from __future__ import annotations

from typing import Any

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.events import NotStored, Stored
from invalidation_contracts.client.readers import ProblemErrorsReader
from invalidation_contracts.client.values import Observed

ORIGIN = "https://payments.example"
REQUEST = {"plan": "enterprise", "funding_type": "card"}


def errors_problem(*errors: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "https://payments.example/problems/invalid-request",
        "title": "Your request is not valid.",
        "status": 422,
        "errors": list(errors),
    }


def observe(memory: FixMemory, body: dict[str, Any], request: dict[str, Any] | None = REQUEST):
    return memory.observe(ORIGIN, Observed(status=422, body=body, request=request), episode=1)


def memory() -> FixMemory:
    return FixMemory("learned", reader=ProblemErrorsReader())


def test_an_errors_item_with_one_value_becomes_a_fix_scoped_by_the_request():
    m = memory()
    body = errors_problem(
        {"pointer": "#/funding_type", "detail": "use invoice", "allowed": ["invoice"]}
    )
    [stored] = [e for e in observe(m, body).events if isinstance(e, Stored)]
    [entry] = m.entries(ORIGIN)
    assert entry.suggestion.parameters == {"funding_type": "invoice"}
    assert entry.key.scope_fields == {"plan": "enterprise"}
    assert entry.suggestion.type.endswith("#funding_type")
    assert m.lookup(ORIGIN, REQUEST, episode=2).entries == (entry,)


def test_an_errors_item_with_several_values_is_not_stored_and_says_why():
    body = errors_problem({"pointer": "/funding_type", "allowed": ["invoice", "wire"]})
    events = observe(memory(), body).events
    assert [e.reason for e in events if isinstance(e, NotStored)] == [
        "funding_type: not exactly one value to use"
    ]


def test_a_plain_detail_is_not_stored_and_says_why():
    body = {
        "type": "about:blank",
        "title": "Bad",
        "status": 422,
        "detail": "funding must be invoice",
    }
    events = observe(memory(), body).events
    assert [e.reason for e in events if isinstance(e, NotStored)] == [
        "a plain detail: no field and value to read"
    ]


def test_an_unknown_error_shape_stores_nothing_and_says_why():
    events = observe(memory(), {"error": {"code": 17}}).events
    assert [e.reason for e in events if isinstance(e, NotStored)] == [
        "an unknown error shape: no errors list or detail"
    ]


def test_a_pointer_below_the_top_level_is_not_read():
    body = errors_problem({"pointer": "/billing/funding_type", "expected": "invoice"})
    events = observe(memory(), body).events
    assert [e.reason for e in events if isinstance(e, NotStored)] == [
        "an errors item without a pointer to one top-level field"
    ]


def test_without_the_request_a_fix_cannot_be_scoped_and_is_not_stored():
    body = errors_problem({"pointer": "/funding_type", "expected": "invoice"})
    events = observe(memory(), body, request=None).events
    assert [e.reason for e in events if isinstance(e, NotStored)] == [
        "funding_type: no request to scope the fix by"
    ]


def test_a_contract_body_is_read_as_it_is_not_through_the_reader():
    body = errors_problem({"pointer": "/funding_type", "expected": "wire"})
    body["recovery_feedback"] = {
        "suggestions": [
            {
                "type": "USE_INVOICE",
                "parameters": {"funding_type": "invoice"},
                "action": "rewrite_value",
                "scope": {"plan": "enterprise"},
            }
        ]
    }
    m = memory()
    observe(m, body)
    [entry] = m.entries(ORIGIN)
    assert entry.suggestion.type == "USE_INVOICE"
