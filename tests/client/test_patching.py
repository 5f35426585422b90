"""Client apply mode: cached JSON Patches applied atomically, on patchable paths only."""

from __future__ import annotations

import pytest

from invalidation_contracts.client import (
    Evicted,
    EvictionReason,
    FixMemory,
    PatchRefused,
    Quarantined,
)
from invalidation_contracts.client.patching import apply_patch
from invalidation_contracts.client.values import Observed

PATCHABLE = ["/promo_code", "/payment_method_token", "/metadata"]


def test_a_patch_on_patchable_paths_is_applied_to_a_copy():
    request = {"plan": "p", "metadata": {"a": 1}}

    result = apply_patch(
        request,
        [
            {"op": "add", "path": "/promo_code", "value": "SUMMER"},
            {"op": "add", "path": "/metadata/b", "value": 2},
        ],
        PATCHABLE,
    )

    assert result.applied and result.request == {
        "plan": "p",
        "promo_code": "SUMMER",
        "metadata": {"a": 1, "b": 2},
    }
    assert request == {"plan": "p", "metadata": {"a": 1}}


def test_a_patch_writing_outside_the_patchable_paths_is_refused():
    with pytest.raises(PatchRefused) as refused:
        apply_patch({"plan": "p"}, [{"op": "replace", "path": "/plan", "value": "free"}], PATCHABLE)

    assert refused.value.paths == ("/plan",)


def test_a_patchable_prefix_does_not_admit_a_sibling_with_a_longer_name():
    with pytest.raises(PatchRefused):
        apply_patch({}, [{"op": "add", "path": "/promo_code_2", "value": "x"}], PATCHABLE)


def test_a_move_from_a_path_that_is_not_patchable_is_refused():
    with pytest.raises(PatchRefused):
        apply_patch(
            {"plan": "p"}, [{"op": "move", "from": "/plan", "path": "/promo_code"}], PATCHABLE
        )


def test_a_test_operation_may_read_any_path():
    patch = [
        {"op": "test", "path": "/plan", "value": "p"},
        {"op": "add", "path": "/promo_code", "value": "S"},
    ]

    assert apply_patch({"plan": "p"}, patch, PATCHABLE).request == {"plan": "p", "promo_code": "S"}


def test_a_failed_precondition_leaves_the_request_unchanged():
    patch = [
        {"op": "test", "path": "/plan", "value": "other"},
        {"op": "add", "path": "/promo_code", "value": "S"},
    ]

    result = apply_patch({"plan": "p"}, patch, PATCHABLE)

    assert not result.applied and result.request == {"plan": "p"}
    assert result.reason.startswith("precondition failed")


def test_a_patch_that_fails_midway_applies_nothing():
    patch = [
        {"op": "add", "path": "/promo_code", "value": "S"},
        {"op": "remove", "path": "/payment_method_token"},
    ]

    result = apply_patch({"plan": "p"}, patch, PATCHABLE)

    assert not result.applied and result.request == {"plan": "p"}


def test_an_explicit_null_value_is_applied():
    assert apply_patch(
        {}, [{"op": "add", "path": "/promo_code", "value": None}], PATCHABLE
    ).request == {"promo_code": None}


def test_a_malformed_patch_is_refused():
    with pytest.raises(PatchRefused, match="not a JSON Patch"):
        apply_patch({}, [{"op": "frobnicate", "path": "/promo_code"}], PATCHABLE)


def _memory_with(server, *fixes):
    memory = FixMemory("row")
    memory.set_patchable(server.url, PATCHABLE)
    memory.observe(server.url, Observed(None, 422, server.failure(*fixes)))
    return memory


def test_the_memory_applies_each_relevant_entrys_patch_in_order(server):
    memory = _memory_with(
        server,
        server.fix(
            "ADD_PROMO",
            {"promo_code": "S"},
            reads={"codes": ["plan_a"]},
            patch=[{"op": "add", "path": "/promo_code", "value": "S"}],
        ),
        server.fix(
            "USE_CREDIT",
            {"payment_method_token": "t2"},
            reads={"tokens": ["tok_x"]},
            patch=[{"op": "replace", "path": "/payment_method_token", "value": "t2"}],
        ),
    )

    outcome = memory.apply_patches(
        server.url, {"payment_method_token": "t1"}, memory.lookup(server.url, {}).entries
    )

    assert outcome.request == {"payment_method_token": "t2", "promo_code": "S"}
    assert outcome.applied == ("e1", "e2") and outcome.events == ()


def test_an_entry_whose_patch_writes_off_limits_is_quarantined(server):
    memory = _memory_with(
        server,
        server.fix(
            "DOWNGRADE",
            {"plan": "free"},
            reads={"codes": ["plan_a"]},
            patch=[{"op": "replace", "path": "/plan", "value": "free"}],
        ),
    )

    outcome = memory.apply_patches(
        server.url, {"plan": "pro"}, memory.lookup(server.url, {}).entries
    )

    assert outcome.request == {"plan": "pro"} and outcome.applied == ()
    assert [e.entry_id for e in outcome.events if isinstance(e, Quarantined)] == ["e1"]
    assert memory.entries(server.url) == []
    assert memory.tombstones(server.url)[0].reason is EvictionReason.QUARANTINE


def test_an_entry_without_a_patch_is_left_to_the_planner(server):
    memory = _memory_with(
        server, server.fix("ADD_PROMO", {"promo_code": "S"}, reads={"codes": ["plan_a"]})
    )

    outcome = memory.apply_patches(server.url, {}, memory.lookup(server.url, {}).entries)

    assert outcome.skipped == (("e1", "no patch; left to the planner"),) and outcome.request == {}


def test_client_apply_mode_needs_the_origins_patchable_paths(server):
    memory = FixMemory("row")

    with pytest.raises(ValueError, match="no patchable paths"):
        memory.apply_patches(server.url, {}, [])


def test_patchable_paths_are_json_pointers_or_top_level_field_names(server):
    memory = FixMemory("row")

    memory.set_patchable(server.url, ["promo_code", "/metadata/note", "a/b"])

    assert memory.state(server.url).patchable == ["/a~1b", "/metadata/note", "/promo_code"]


def test_an_ill_formed_patchable_pointer_is_refused(server):
    with pytest.raises(ValueError, match="not a JSON Pointer"):
        FixMemory("row").set_patchable(server.url, ["/bad~2escape"])


def test_the_planned_request_is_never_mutated(server):
    memory = _memory_with(
        server,
        server.fix(
            "META",
            {"metadata": {"b": 2}},
            reads={"codes": ["plan_a"]},
            patch=[{"op": "add", "path": "/metadata/b", "value": 2}],
        ),
    )
    planned = {"metadata": {"a": 1}}

    memory.apply_patches(server.url, planned, memory.lookup(server.url, {}).entries)

    assert planned == {"metadata": {"a": 1}}


# -- client apply mode: only within scope (issue #15 item 4)


def _scoped_promo(server):
    return server.fix(
        "ADD_PROMO",
        {"promo_code": "AGENCYPRO15"},
        scope={"plan": "plan_agency_pro"},
        reads={"codes": ["plan_agency_pro"]},
        patch=[{"op": "add", "path": "/promo_code", "value": "AGENCYPRO15"}],
    )


def test_a_patch_applies_only_to_a_planned_request_its_scope_matches(server):
    memory = _memory_with(server, _scoped_promo(server))
    entries = list(
        memory.lookup(server.url, {"plan": "plan_agency_pro"}).entries
    )  # chosen on the draft

    planned = {"plan": "plan_starter_monthly", "customer": "cus_northwind"}
    outcome = memory.apply_patches(server.url, planned, entries)
    in_scope = memory.apply_patches(server.url, {"plan": "plan_agency_pro"}, entries)

    assert outcome.request == planned and outcome.applied == ()
    assert outcome.skipped[0][0] == "e1" and "precondition failed" in outcome.skipped[0][1]
    assert in_scope.request == {"plan": "plan_agency_pro", "promo_code": "AGENCYPRO15"}


def test_a_rejected_request_carrying_a_mis_scoped_fix_does_not_contradict_it(server):
    memory = _memory_with(server, _scoped_promo(server))
    remove = server.fix(
        "REMOVE_INELIGIBLE_PROMO_CODE",
        {"promo_code": None},
        scope={"plan": "plan_starter_monthly", "promo_code": "AGENCYPRO15"},
        reads={"codes": ["plan_starter_monthly"]},
    )
    sent = {"plan": "plan_starter_monthly", "promo_code": "AGENCYPRO15"}

    obs = memory.observe(server.url, Observed(sent, 422, server.failure(remove), injected=["e1"]))

    assert EvictionReason.CONTRADICTED not in {e.reason for e in obs.of(Evicted)}
    assert "e1" in {e.id for e in memory.entries(server.url)}


def test_a_rejected_request_carrying_a_fix_in_scope_still_contradicts_it(server):
    memory = _memory_with(server, _scoped_promo(server))
    remove = server.fix(
        "REMOVE_INELIGIBLE_PROMO_CODE",
        {"promo_code": None},
        scope={"plan": "plan_agency_pro", "promo_code": "AGENCYPRO15"},
        reads={"codes": ["plan_agency_pro"]},
    )
    sent = {"plan": "plan_agency_pro", "promo_code": "AGENCYPRO15"}

    obs = memory.observe(server.url, Observed(sent, 422, server.failure(remove), injected=["e1"]))

    assert [(e.entry_id, e.reason) for e in obs.of(Evicted)] == [
        ("e1", EvictionReason.CONTRADICTED)
    ]


def test_an_entry_of_another_operation_is_not_applied(server):
    memory = _memory_with(server, _scoped_promo(server))
    entries = list(memory.lookup(server.url, {"plan": "plan_agency_pro"}).entries)

    outcome = memory.apply_patches(
        server.url, {"plan": "plan_agency_pro"}, entries, operation="POST /v1/refunds"
    )

    assert outcome.applied == ()
    assert outcome.skipped[0][1] == "learned on operation '', not 'POST /v1/refunds'"


def test_an_entry_evicted_since_it_was_looked_up_is_not_applied(server):
    memory = _memory_with(server, _scoped_promo(server))
    entries = list(memory.lookup(server.url, {"plan": "plan_agency_pro"}).entries)
    memory.evict(server.url, entry_ids=["e1"])

    outcome = memory.apply_patches(server.url, {"plan": "plan_agency_pro"}, entries)

    assert outcome.applied == () and outcome.skipped == (("e1", "no longer live"),)


@pytest.mark.parametrize("verb", ["copy", "move"])
def test_a_patch_that_copies_or_moves_is_refused_even_between_patchable_paths(verb):
    patch = [{"op": verb, "from": "/promo_code", "path": "/metadata/note"}]

    with pytest.raises(PatchRefused, match="only add, replace, remove and test"):
        apply_patch({"promo_code": "A", "metadata": {}}, patch, ["/promo_code", "/metadata"])
