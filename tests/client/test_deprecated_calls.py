"""The memory's calls as earlier versions spelt them: each still works, and warns naming today's.

``observe(origin, request, status, body, **fields)`` is ``observe(origin, Observed(...))``;
``relevant`` and ``fixes_for`` are ``lookup``. They go in 0.3.0 (``_deprecation.REMOVED_IN``).
"""

from __future__ import annotations

import asyncio
import inspect
import pydoc

import pytest

from invalidation_contracts.client import AsyncFixMemory, FixMemory, Observed

NEW_OBSERVE = r"FixMemory\.observe\(origin, Observed\(request, status, body, \.\.\.\)\)"
DRAFT = {"plan": "plan_a"}


def failure(server):
    return server.failure(server.fix("ADD_PROMO", {"promo_code": "S"}, reads={"codes": ["plan_a"]}))


def learned(memory: FixMemory, origin: str) -> list[tuple[str, dict[str, object]]]:
    return [(e.type, dict(e.suggestion.parameters)) for e in memory.entries(origin)]


def test_observe_in_the_positional_form_warns_naming_observed(server):
    memory = FixMemory("row")

    with pytest.warns(DeprecationWarning, match=NEW_OBSERVE) as caught:
        memory.observe(server.url, DRAFT, 422, failure(server))

    assert caught[0].filename == __file__  # the warning points at the caller


def test_observe_in_the_positional_form_learns_what_the_observed_form_learns(server):
    old, new = FixMemory("row"), FixMemory("row")

    with pytest.warns(DeprecationWarning):
        before = old.observe(server.url, DRAFT, 422, failure(server), episode=1)
    after = new.observe(server.url, Observed(DRAFT, 422, failure(server)), episode=1)

    assert before == after
    assert learned(old, server.url) == learned(new, server.url) != []


def test_observe_keeps_the_observed_fields_given_as_keywords(server):
    memory = FixMemory("row")

    with pytest.warns(DeprecationWarning):
        memory.observe(server.url, DRAFT, 422, failure(server), response_id="req-7", operation="op")

    (entry,) = memory.lookup(server.url, DRAFT, operation="op").entries
    assert entry.provenance.response_id == "req-7"


def test_observe_in_the_positional_form_still_names_a_missing_argument(server):
    with pytest.raises(TypeError, match="missing required argument 'body'"):
        FixMemory("row").observe(server.url, DRAFT, 422)


def test_observe_in_todays_form_does_not_warn(server, recwarn):
    FixMemory("row").observe(server.url, Observed(DRAFT, 422, failure(server)), episode=1)

    assert [w for w in recwarn if w.category is DeprecationWarning] == []


def test_relevant_warns_naming_lookup_and_returns_its_entries(server):
    memory = FixMemory("row")
    memory.observe(server.url, Observed(DRAFT, 422, failure(server)))

    with pytest.warns(DeprecationWarning, match=r"FixMemory\.relevant .* FixMemory\.lookup"):
        served = memory.relevant(server.url, DRAFT)

    assert served == list(memory.lookup(server.url, DRAFT).entries) != []


def test_fixes_for_warns_naming_lookup_and_returns_every_fix_of_the_operation(server):
    memory = FixMemory("row")
    memory.observe(server.url, Observed(DRAFT, 422, failure(server)), operation="op")

    with pytest.warns(DeprecationWarning, match=r"FixMemory\.fixes_for .* FixMemory\.lookup"):
        every = memory.fixes_for(server.url, "op")

    assert every == list(memory.lookup(server.url, operation="op").entries) != []


def test_the_async_memory_warns_for_relevant_too(server):
    memory = AsyncFixMemory("row")

    async def body() -> list[object]:
        await memory.observe(server.url, Observed(DRAFT, 422, failure(server)))
        with pytest.warns(DeprecationWarning, match=r"AsyncFixMemory\.lookup"):
            return await memory.relevant(server.url, DRAFT)

    assert [e.type for e in asyncio.run(body())] == ["ADD_PROMO"]


@pytest.mark.parametrize("kind", [FixMemory, AsyncFixMemory])
def test_each_call_shows_its_real_signature_and_docstring(kind):
    signature = inspect.signature(kind.observe)

    assert list(signature.parameters) == ["self", "origin", "observed", "operation", "episode"]
    assert signature.return_annotation == "Observation"
    assert inspect.signature(kind().lookup).return_annotation == "Lookup"
    assert kind.observe.__doc__.startswith("Feed one response from ``origin``")


def test_help_documents_each_call_as_a_method():
    text = pydoc.render_doc(FixMemory, renderer=pydoc.plaintext)

    assert "observe(self, origin: 'str', observed: 'Observed', *" in text
    assert "Feed one response from ``origin``" in text
    assert "_Steps object" not in text and "_Reader object" not in text


def test_a_call_through_the_class_works_as_a_method_call(server):
    memory = FixMemory("row")

    FixMemory.observe(memory, server.url, Observed(DRAFT, 422, failure(server)))

    assert FixMemory.lookup(memory, server.url, DRAFT).entries
