"""Client-side bounds on what a server controls: over a cap is refused, reported, never stored.

Each bound of ``Limits``, the scope rules (a fix's scope must match the request that drew it; an
empty scope needs ``origin_wide``) and the patch rules (add, replace, remove and test only, and
only what the parameters show).
"""

from __future__ import annotations

import logging

import pytest

from invalidation_contracts.client import (
    Evicted,
    EvictionReason,
    FetchChanges,
    FixMemory,
    Quarantined,
    Refused,
    Stored,
)
from invalidation_contracts.client.limits import Limits
from invalidation_contracts.client.shared.layout import namespace
from invalidation_contracts.client.stores import InMemoryStore
from invalidation_contracts.client.values import Answer, Observed

PROMO = {"promo_code": "SUMMER"}


def learn(memory, server, *fixes, request=None):
    return memory.observe(server.url, Observed(request, 422, server.failure(*fixes)))


def promo(server, code="SUMMER", plan="plan_a", **extra):
    return server.fix(
        "ADD_PROMO", {"promo_code": code}, scope={"plan": plan}, reads={"codes": [plan]}, **extra
    )


def test_a_response_over_the_suggestion_cap_has_none_of_its_suggestions_stored(server):
    memory = FixMemory("row", limits=Limits(max_suggestions=2))
    fixes = [promo(server, plan=f"p{n}") for n in range(3)]

    obs = learn(memory, server, *fixes)

    (refused,) = obs.of(Refused)
    assert (refused.bound, refused.cap, refused.actual) == ("max_suggestions", 2, 3)
    assert memory.entries(server.url) == []


def test_a_response_at_the_suggestion_cap_is_stored(server):
    memory = FixMemory("row", limits=Limits(max_suggestions=2))

    obs = learn(memory, server, promo(server, plan="p0"), promo(server, plan="p1"))

    assert len(obs.of(Stored)) == 2 and obs.of(Refused) == []


def test_a_parameter_value_over_the_byte_cap_is_refused_and_never_served(server):
    memory = FixMemory("row", limits=Limits(max_parameter_bytes=64))
    big = promo(server, code="X" * 100)

    obs = learn(memory, server, big)

    (refused,) = obs.of(Refused)
    assert refused.bound == "max_parameter_bytes" and refused.actual == 102
    assert refused.suggestion_type == "ADD_PROMO"
    assert list(memory.lookup(server.url, {"plan": "plan_a"}).entries) == []


def test_a_patch_value_over_the_byte_cap_is_refused(server):
    memory = FixMemory("row", limits=Limits(max_parameter_bytes=64))
    fix = promo(server, patch=[{"op": "add", "path": "/promo_code", "value": "Y" * 100}])

    (refused,) = learn(memory, server, fix).of(Refused)

    assert refused.bound == "max_parameter_bytes"


def test_a_suggestion_over_the_byte_cap_is_refused_and_the_others_are_kept(server):
    memory = FixMemory("row", limits=Limits(max_suggestion_bytes=600))
    wide = promo(server, plan="plan_b", message="m" * 600)

    obs = learn(memory, server, promo(server), wide)

    (refused,) = obs.of(Refused)
    assert refused.bound == "max_suggestion_bytes" and refused.actual > 600
    assert [e.scope for e in memory.entries(server.url)] == [{"plan": "plan_a"}]


def test_an_origin_at_its_entry_cap_refuses_new_fixes_and_accepts_a_replacement(server):
    memory = FixMemory("row", limits=Limits(max_entries_per_origin=2))
    learn(memory, server, promo(server, plan="p0"), promo(server, plan="p1"))

    refused = learn(memory, server, promo(server, plan="p2")).of(Refused)
    replaced = learn(memory, server, promo(server, code="NEW", plan="p1")).of(Stored)

    assert [(r.bound, r.cap, r.actual) for r in refused] == [("max_entries_per_origin", 2, 2)]
    assert [s.replaced for s in replaced] == ["e2"]
    assert len(memory.entries(server.url)) == 2


def test_a_body_over_the_byte_cap_has_its_contract_left_unread(server):
    memory = FixMemory("row", limits=Limits(max_body_bytes=1000))
    learn(memory, server, promo(server))
    server.update("codes", "plan_a", {"code": "WINTER"})

    obs = memory.observe(server.url, Observed(None, 200, server.success(), response_bytes=1001))

    (refused,) = obs.of(Refused)
    assert (refused.bound, refused.actual) == ("max_body_bytes", 1001)
    assert obs.needs == () and len(memory.entries(server.url)) == 1
    assert memory.stats(server.url).response_bytes == 1001


def test_a_changes_feed_over_the_item_cap_is_treated_as_lost_history(server, standard_fixes):
    memory = FixMemory("row", limits=Limits(max_feed_items=3))
    learn(memory, server, *standard_fixes(server))
    for n in range(3):
        server.update("codes", f"plan_{n}", {"code": f"C{n}"})
    (need,) = memory.observe(server.url, Observed(None, 200, server.success())).needs

    obs = memory.answer(need, Answer(200, server.changes(need.since)))

    (refused,) = obs.of(Refused)
    assert (refused.bound, refused.cap) == ("max_feed_items", 3) and refused.actual > 3
    assert {e.reason for e in obs.of(Evicted)} == {EvictionReason.RESYNC}
    assert memory.entries(server.url) == [] and obs.needs == ()


def test_a_changes_feed_over_the_byte_cap_is_treated_as_lost_history(server, standard_fixes):
    memory = FixMemory("row", limits=Limits(max_feed_bytes=1024))
    learn(memory, server, *standard_fixes(server))
    need = FetchChanges(server.url, 0, "epoch-1")

    obs = memory.answer(need, Answer(200, None, body_bytes=1025))

    assert [(r.bound, r.actual) for r in obs.of(Refused)] == [("max_feed_bytes", 1025)]
    assert len(obs.of(Evicted)) == 3 and memory.state(server.url).known_seq is None


def test_an_empty_scope_is_refused_unless_the_server_marks_the_fix_origin_wide(server):
    memory = FixMemory("row")
    unmarked = server.fix("GLOBAL", {"region": "eu"}, reads={"codes": None}, origin_wide=None)
    marked = server.fix("WIDE", {"region": "eu"}, reads={"codes": None})

    obs = learn(memory, server, unmarked, marked)

    assert [(r.bound, r.suggestion_type) for r in obs.of(Refused)] == [("unscoped", "GLOBAL")]
    assert [e.type for e in memory.lookup(server.url, {"any": "request"}).entries] == ["WIDE"]


def test_a_stored_unscoped_entry_without_the_marker_is_quarantined_not_served(server):
    store = InMemoryStore()
    memory = FixMemory("row", store=store)
    learn(memory, server, server.fix("WIDE", {"region": "eu"}, reads={"codes": None}))
    (item,) = store.search(namespace(server.url, "entries"))
    item.value["suggestion"].pop("origin_wide")  # as a file written before the marker existed
    store.put(item.namespace, item.key, item.value)
    reader = FixMemory("row", store=store)

    found = reader.lookup(server.url, {"any": "request"})

    assert found.entries == ()
    assert [e.entry_id for e in found.events if isinstance(e, Quarantined)] == ["e1"]


def test_a_fix_keyed_on_values_its_request_did_not_have_is_refused(server):
    memory = FixMemory("row")

    obs = learn(memory, server, promo(server, plan="plan_b"), request={"plan": "plan_a"})

    assert [r.bound for r in obs.of(Refused)] == ["scope"]
    assert memory.entries(server.url) == []


def test_a_fix_keyed_on_its_requests_values_is_stored(server):
    memory = FixMemory("row")

    obs = learn(memory, server, promo(server), request={"plan": "plan_a", "amount": 5})

    assert len(obs.of(Stored)) == 1


@pytest.mark.parametrize(
    "op",
    [
        {"op": "copy", "from": "/customer", "path": "/promo_code"},
        {"op": "move", "from": "/customer", "path": "/promo_code"},
    ],
)
def test_a_patch_that_copies_or_moves_is_refused(server, op):
    memory = FixMemory("row")

    obs = learn(memory, server, promo(server, patch=[op]))

    (refused,) = obs.of(Refused)
    assert refused.bound == "patch" and op["op"] in refused.detail
    assert memory.entries(server.url) == []


def test_a_patch_writing_another_value_than_its_parameters_show_is_refused(server):
    memory = FixMemory("row")
    fix = promo(server, patch=[{"op": "add", "path": "/promo_code", "value": "OTHER"}])

    (refused,) = learn(memory, server, fix).of(Refused)

    assert refused.detail == "it writes /promo_code with another value than its parameters show"


def test_a_patch_that_tests_and_writes_what_its_parameters_show_is_stored(server):
    memory = FixMemory("row")
    patch = [
        {"op": "test", "path": "/plan", "value": "plan_a"},
        {"op": "add", "path": "/promo_code", "value": "SUMMER"},
    ]

    assert learn(memory, server, promo(server, patch=patch)).of(Stored)


def test_a_violated_bound_is_a_log_record(server, caplog):
    memory = FixMemory("row", limits=Limits(max_suggestions=1))

    with caplog.at_level(logging.WARNING, logger="invalidation_contracts.client"):
        learn(memory, server, promo(server, plan="p0"), promo(server, plan="p1"))

    (record,) = caplog.records
    assert record.name == "invalidation_contracts.client" and record.levelno == logging.WARNING
    assert "max_suggestions" in record.getMessage() and server.url in record.getMessage()


def test_refusals_are_counted_by_bound(server):
    memory = FixMemory("row", limits=Limits(max_suggestions=1))
    learn(memory, server, promo(server, plan="p0"), promo(server, plan="p1"))
    learn(memory, server, server.fix("GLOBAL", {"x": 1}, reads={"codes": None}, origin_wide=None))

    assert memory.stats(server.url).refused == {"max_suggestions": 1, "unscoped": 1}


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10"])
def test_a_limit_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="max_suggestions must be a positive integer"):
        Limits(max_suggestions=bad)


def test_the_defaults_are_documented_values():
    assert Limits() == Limits(
        max_suggestions=64,
        max_parameter_bytes=4096,
        max_suggestion_bytes=65536,
        max_entries_per_origin=10_000,
        max_body_bytes=1 << 20,
        max_feed_bytes=4 << 20,
        max_feed_items=100_000,
    )


def test_a_response_id_longer_than_any_real_one_is_not_kept(server):
    memory = FixMemory("row")

    memory.observe(
        server.url, Observed(None, 422, server.failure(promo(server)), response_id="r" * 257)
    )
    memory.observe(
        server.url, Observed(None, 422, server.failure(promo(server, plan="p")), response_id="r1")
    )

    assert [e.provenance.response_id for e in memory.entries(server.url)] == [None, "r1"]
