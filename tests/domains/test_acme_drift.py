"""Acme drift snapshots and what each invalidation granularity should make of them (paper §4)."""

import pytest
from domain_helpers import applied, ask, dependency_keys, first_fix, load

STREAM_FAMILIES = [
    "governed-partner-growth",
    "control-partner-starter",
    "control-agency-pro",
    "funding-enterprise-annual",
]


def learned(catalog, registry):
    return {fid: first_fix(catalog, fid, registry) for fid in STREAM_FAMILIES}


def table_evictions(memory, result):
    return {fid for fid, s in memory.items() if any(d.table == result.table for d in s.tables)}


def row_evictions(memory, result):
    changed = {(result.table, key) for key in result.diff.keys}
    return {fid for fid, s in memory.items() if dependency_keys(s) & changed}


def stale(catalog, memory, registry):
    return {
        fid
        for fid, s in memory.items()
        if not catalog.is_fix_current(s, catalog.family(fid).fields, registry.state)
    }


def test_rotation_changes_exactly_the_governed_row(acme):
    result = load(acme.domain.registry(), acme, "active_csm_codes.rotation-1")
    assert (result.diff.added, result.diff.removed, result.diff.changed) == (
        [],
        [],
        ["plan_partner_growth"],
    )
    assert (result.old_version, result.new_version) == ("1.0.0", "1.1.0")


@pytest.mark.parametrize("count", [1, 2, 3])
def test_successive_rotations_each_change_only_the_governed_code(acme, count):
    registry = acme.domain.registry()
    codes = []
    for n in range(1, count + 1):
        assert load(registry, acme, f"active_csm_codes.rotation-{n}").diff.changed == [
            "plan_partner_growth"
        ]
        codes.append(first_fix(acme, "governed-partner-growth", registry).parameters["promo_code"])
    assert codes == ["WINTERLAUNCH26", "SPRINGRENEW27", "AUTUMNBOOST28"][:count]


def test_rotation_makes_exactly_the_governed_fix_stale(acme):
    registry = acme.domain.registry()
    memory = learned(acme, registry)
    load(registry, acme, "active_csm_codes.rotation-1")
    assert stale(acme, memory, registry) == {"governed-partner-growth"}


def test_injecting_the_stale_governed_fix_fails_with_the_new_code(acme):
    registry = acme.domain.registry()
    old = first_fix(acme, "governed-partner-growth", registry)
    load(registry, acme, "active_csm_codes.rotation-1")
    draft = acme.family("governed-partner-growth").draft()
    status, (new,), _ = ask(acme, applied(draft, old), registry)
    assert (
        status == 422
        and new.type == old.type
        and new.parameters == {"promo_code": "WINTERLAUNCH26"}
    )


@pytest.mark.parametrize("family_id", ["control-partner-starter", "control-agency-pro"])
def test_the_negative_control_fix_still_passes_after_the_rotation(acme, family_id):
    registry = acme.domain.registry()
    fix = first_fix(acme, family_id, registry)
    load(registry, acme, "active_csm_codes.rotation-1")
    assert ask(acme, applied(acme.family(family_id).draft(), fix), registry)[0] == 200


def test_benign_bump_moves_the_version_and_no_cached_fixs_rows(acme):
    registry = acme.domain.registry()
    memory = learned(acme, registry)
    result = load(registry, acme, "token_funding_map.benign-bump")
    assert result.new_version != result.old_version and result.diff
    assert row_evictions(memory, result) == set() and stale(acme, memory, registry) == set()


def test_the_funding_fix_still_passes_after_the_benign_bump(acme):
    registry = acme.domain.registry()
    fix = first_fix(acme, "funding-enterprise-annual", registry)
    load(registry, acme, "token_funding_map.benign-bump")
    assert (
        ask(acme, applied(acme.family("funding-enterprise-annual").draft(), fix), registry)[0]
        == 200
    )


def test_touch_has_an_empty_diff_and_a_new_version(acme):
    result = load(acme.domain.registry(), acme, "recommended_credit_token.touch")
    assert result.touch and not result.diff and result.new_version == "1.0.1"


def test_table_granularity_evicts_four_with_one_correct_and_row_granularity_only_the_correct_one(
    acme,
):
    registry = acme.domain.registry()
    memory = learned(acme, registry)
    rotation = load(registry, acme, "active_csm_codes.rotation-1")
    table = table_evictions(memory, rotation)
    row = row_evictions(memory, rotation)
    correct = stale(acme, memory, registry)
    bump = load(registry, acme, "token_funding_map.benign-bump")
    table_bump, row_bump = table_evictions(memory, bump), row_evictions(memory, bump)
    assert table == {"governed-partner-growth", "control-partner-starter", "control-agency-pro"}
    assert table_bump == {"funding-enterprise-annual"}
    assert row == correct == {"governed-partner-growth"} and row_bump == set()
    assert len(correct) / (len(table) + len(table_bump)) == 0.25


def test_the_graph_walk_at_the_rotation_reaches_no_other_cached_fix(acme):
    registry = acme.domain.registry()
    memory = learned(acme, registry)
    rotation = load(registry, acme, "active_csm_codes.rotation-1")
    reached = {tuple(node.split(":", 1)) for node in rotation.affected_downstream}
    assert {fid for fid, s in memory.items() if dependency_keys(s) & reached} == {
        "governed-partner-growth"
    }
