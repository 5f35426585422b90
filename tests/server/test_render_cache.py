"""The render cache serves, byte for byte, what rendering afresh produces (``feedback.failure``,
presented, encoded), whatever the findings, headers and registry states; it stays bounded; and a
finding it cannot key exactly is rendered every time, failing as it would uncached."""

from __future__ import annotations

import threading
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from invalidation_contracts.protocol import Action, Level
from invalidation_contracts.server import (
    Asked,
    Finding,
    Provider,
    Registry,
    Rule,
    Violation,
    feedback,
)
from invalidation_contracts.server.opaque import OpaqueNames
from invalidation_contracts.server.render_cache import BoundedCache, RenderCache, finding_key

TABLES = {
    "plans": {"basic": {"tier": 1}, "pro": {"tier": 2}},
    "codes": {"basic": {"code": "B1"}, "pro": {"code": "P2"}},
}
RULES = [Rule("plans", "codes", "offers")]
FIELDS = ["plan", "code", "amount", "a/b~c"]

#: Values that collide under == and hash (1, 1.0, True; 0, False) so keys must tell them apart.
SCALARS = st.sampled_from([None, True, False, 0, 1, 1.0, 0.0, -1.5, "1", "", "é", "x"])
JSON = st.recursive(
    SCALARS | st.floats(allow_nan=True) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
OBJECTS = st.dictionaries(st.sampled_from(FIELDS), JSON, max_size=3)


@st.composite
def findings(draw: st.DrawFn) -> Finding:
    read = draw(st.lists(st.sampled_from(sorted(TABLES)), unique=True, max_size=2))
    reads = {
        t: draw(st.none() | st.frozensets(st.sampled_from(["basic", "pro", "gone"]), max_size=2))
        for t in read
    }
    violation = Violation(
        type=draw(st.sampled_from(["FIX_A", "FIX_B"])),
        message=draw(st.sampled_from(["fix it", "fix it differently", "é"])),
        parameters=draw(OBJECTS),
        action=draw(st.sampled_from(list(Action))),
        scope=draw(OBJECTS),
        precondition=draw(OBJECTS),
        table=draw(st.none() | st.sampled_from(sorted(TABLES))),
        no_store=draw(st.booleans()),
        max_age_s=draw(st.none() | st.integers(0, 3)),
    )
    rules = tuple(draw(st.lists(st.sampled_from([r.triple for r in RULES]), max_size=1)))
    absent = tuple(draw(st.lists(st.sampled_from([("codes", None, None)]), max_size=1)))
    return Finding("policy", violation, reads, tuple(read), rules, absent)


HEADERS = st.tuples(
    st.sampled_from([None, 0, 1, 2]),
    st.sampled_from([None, "golden", "another"]),
    st.sampled_from([None, frozenset(FIELDS), frozenset(FIELDS[:2])]),
    st.sampled_from([None, "/v1/x"]),
)
#: A step is a request (findings and headers) or a reload of a table.
STEPS = st.lists(
    st.one_of(
        st.tuples(st.lists(findings(), min_size=1, max_size=2), HEADERS),
        st.sampled_from(sorted(TABLES)),
    ),
    max_size=12,
)


def fresh(level: Level, opaque: bool) -> tuple[Registry, RenderCache, Any]:
    registry = Registry(TABLES, RULES, epoch="golden")
    present = OpaqueNames(b"k" * 16).contract if opaque else (lambda body: body)
    return registry, RenderCache(level, present, capacity=4), present


def uncached(found, state, level, present, since, epoch, patchable, instance) -> bytes:
    body = feedback.failure(found, state, level, Asked(since, epoch, instance), patchable)
    return present(body).to_json()


@settings(max_examples=150, deadline=None)
@given(
    level=st.sampled_from([Level(0), Level(1), Level(4), Level(6)]),
    opaque=st.booleans(),
    steps=STEPS,
    repeats=st.integers(1, 2),
)
def test_cached_documents_are_byte_identical_to_a_fresh_render(level, opaque, steps, repeats):
    registry, cache, present = fresh(level, opaque)
    for step in steps:
        if isinstance(step, str):
            registry.reload(step, {**TABLES[step], "new": {"n": len(registry.state.tables)}})
            continue
        found, (since, epoch, patchable, instance) = step
        state = registry.state
        expected = None
        try:
            expected = uncached(found, state, level, present, since, epoch, patchable, instance)
        except ValidationError:
            pass
        for _ in range(repeats):
            if expected is None:
                with pytest.raises(ValidationError):
                    cache.failure(
                        found,
                        state,
                        Asked(since, epoch, instance),
                        patchable,
                    )
                continue
            rendered = cache.failure(found, state, Asked(since, epoch, instance), patchable)
            assert rendered.content == expected
            assert rendered.body.to_json() == expected


@settings(max_examples=150, deadline=None)
@given(
    template=findings(),
    where=st.sampled_from(["parameters", "scope", "precondition"]),
    values=st.lists(SCALARS | JSON, min_size=2, max_size=5),
    headers=HEADERS,
    level=st.sampled_from([Level(1), Level(6)]),
)
def test_findings_that_differ_only_in_a_value_get_their_own_documents(
    template, where, values, headers, level
):
    registry, cache, present = fresh(level, opaque=False)
    since, epoch, patchable, instance = headers
    for value in values:
        fields = {**getattr(template.violation, where), "amount": value}
        found = [replace(template, violation=replace(template.violation, **{where: fields}))]
        expected = uncached(found, registry.state, level, present, *headers)
        asked = Asked(since, epoch, instance)
        rendered = cache.failure(found, registry.state, asked, patchable)
        assert rendered.content == expected


def test_values_equal_in_python_but_not_in_json_are_different_keys():
    def finding(value: Any) -> Finding:
        fix = Violation("FIX", "m", {"amount": value}, Action.REWRITE_VALUE)
        return Finding("p", fix, {}, (), ())

    keys = [finding_key(finding(v)) for v in (1, 1.0, True)]
    assert len(set(keys)) == 3


@pytest.mark.parametrize(
    "value", [(1, 2), MappingProxyType({"a": 1}), b"bytes", {1: "int key"}], ids=repr
)
def test_a_value_that_is_not_plain_json_is_not_keyed_and_fails_as_uncached(value):
    state = Registry(TABLES, RULES, epoch="golden").state
    cache = RenderCache(Level(6))
    plain = Finding(
        "p", Violation("FIX", "m", {"amount": [1, 2]}, Action.REWRITE_VALUE), {}, (), ()
    )
    odd = Finding("p", Violation("FIX", "m", {"amount": value}, Action.REWRITE_VALUE), {}, (), ())
    cache.failure([plain], state)
    assert finding_key(odd) is None
    with pytest.raises(ValidationError):
        feedback.failure([odd], state, Level(6))
    with pytest.raises(ValidationError):
        cache.failure([odd], state)


def test_an_enum_member_where_a_string_belongs_is_rendered_every_time():
    class Kind(str, __import__("enum").Enum):
        FIX = "FIX"

    finding = Finding("p", Violation(Kind.FIX, "m", {}, Action.ADD_FIELD), {}, (), ())
    assert finding_key(finding) is None
    state = Registry(TABLES, RULES, epoch="golden").state
    assert RenderCache(Level(6)).failure([finding], state).content == (
        feedback.failure([finding], state, Level(6)).to_json()
    )


def test_each_cache_keeps_at_most_its_capacity_and_forgets_the_oldest_first():
    cache: BoundedCache[int, int] = BoundedCache(3)
    for i in range(10):
        cache.put(i, i)
    assert len(cache) == 3
    assert [cache.get(i) for i in (6, 7, 8, 9)] == [None, 7, 8, 9]


def test_the_first_value_stored_for_a_key_wins():
    cache: BoundedCache[str, int] = BoundedCache(3)
    assert cache.put("k", 1) == 1
    assert cache.put("k", 2) == 1


def test_a_cache_needs_room_for_one_entry():
    with pytest.raises(ValueError):
        BoundedCache(0)


def test_contract_fields_follow_the_registry_state():
    registry = Registry(TABLES, RULES, epoch="golden")
    cache = RenderCache(Level(6))
    before = cache.contract(registry.state)
    registry.reload("plans", {"basic": {"tier": 3}})
    after = cache.contract(registry.state)
    assert before.contract_seq == 0 and after.contract_seq == 1
    assert after == feedback.contract_fields(registry.state, Level(6))
    moved = {"plans": registry.state.tables["plans"].version}
    assert cache.contract(registry.state, 0, "golden").table_versions == moved


def test_concurrent_requests_during_reloads_each_get_their_own_states_document(domain):
    provider = Provider(domain, level=Level.RULES_FINGERPRINT)
    route = domain.routes[0]
    payloads = [
        {"plan": "growth", "payment_method_token": "tok_debit", "amount_cents": 150},
        {"plan": "team", "payment_method_token": "tok_debit"},
        {"plan": "growth", "payment_method_token": "tok_credit"},
    ]
    outcomes = []
    errors: list[BaseException] = []

    def client(offset: int) -> None:
        try:
            for i in range(150):
                outcomes.append(provider.handle(route, payloads[(i + offset) % 3], Asked(since=0)))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for i in range(30):
        provider.registry.reload(
            "recommended_credit_token", {"default": {"token": "tok_credit"}}, version=f"1.0.{i + 1}"
        )
    for thread in threads:
        thread.join()
    assert not errors
    assert len(outcomes) == 600
    for outcome in outcomes:
        assert outcome.status == 422
        fresh_body = feedback.failure(
            outcome.findings,
            outcome.state,
            provider.level,
            Asked(since=0),
            route.patchable_fields,
        )
        assert outcome.content == fresh_body.to_json()
