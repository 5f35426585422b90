"""Recipe conversion: the ladder, celiac certification and incompatible combinations, its task
families, and its two drifts."""

import pytest
from domain_helpers import applied, ask, dependency_keys, first_fix, load, longest_chain

from invalidation_contracts.domains.recipes.policies import (
    INCLUDES,
    REQUIRES_CERTIFICATION,
    celiac_certification,
    combination_key,
    dietary_ladder,
    incompatible_combinations,
)
from invalidation_contracts.protocol import Action, CacheHint
from invalidation_contracts.server import evaluate

FIXED_FAMILIES = [
    "vegetarian-chili",
    "vegan-lasagna",
    "gluten-free-lasagna",
    "celiac-penne",
    "celiac-gravy-control",
    "incompatible-cream-sauce",
]

BASE = {
    "recipe": "r",
    "diet": "vegan",
    "servings": 2,
    "protein": "chickpeas",
    "starch": "basmati_rice",
}


def run(catalog, pol, **changes):
    state = catalog.domain.registry().state
    return [f.violation for f in evaluate([pol], {**BASE, **changes}, state.tables, state.rules)]


def test_families_cover_the_four_rungs_of_the_ladder(recipes):
    rungs = {f.fields["diet"] for f in recipes.task_families.values() if f.expected_fix_type}
    assert rungs == {"vegetarian", "vegan", "vegan_gluten_free", "vegan_celiac"}


def test_every_hint_rewrites_an_ingredient_the_task_names(recipes):
    for family_id in FIXED_FAMILIES:
        family = recipes.family(family_id)
        fix = first_fix(recipes, family_id)
        assert (fix.type, fix.action) == (family.expected_fix_type, Action.REWRITE_VALUE)
        assert set(fix.parameters) <= set(family.fields) and fix.cache_hint is CacheHint.CACHEABLE


@pytest.mark.parametrize("family_id", FIXED_FAMILIES)
def test_the_draft_with_the_fix_applied_passes(recipes, family_id):
    fix = first_fix(recipes, family_id)
    assert ask(recipes, applied(recipes.family(family_id).draft(), fix))[0] == 200


def test_the_no_constraint_class_passes_as_is(recipes):
    status, suggestions, body = ask(recipes, recipes.family("plain-vegan-curry").draft())
    assert (
        status == 200
        and suggestions == []
        and body["result"]["ingredients"]["protein"] == "chickpeas"
    )


def test_ladder_forbids_what_every_lower_rung_forbids(recipes):
    (v,) = run(recipes, dietary_ladder, diet="vegan_celiac", protein="beef_mince")
    assert (v.type, dict(v.parameters)) == ("SUBSTITUTE_FOR_DIET", {"protein": "black_beans"})
    assert run(recipes, dietary_ladder, diet="vegetarian", starch="wheat_lasagna_sheets") == []


def test_ladder_fix_depends_on_every_rung_walked_and_the_substitution_row(recipes):
    fix = first_fix(recipes, "gluten-free-lasagna")
    assert {k for t, k in dependency_keys(fix) if t == "dietary_ladder"} == {
        "vegetarian",
        "vegan",
        "vegan_gluten_free",
    }
    assert ("substitutions", "wheat_lasagna_sheets") in dependency_keys(fix)
    assert [tuple(r) for r in fix.rules] == [INCLUDES]


def test_unknown_diet_and_ingredient_are_refused_without_a_fix(recipes):
    (diet,) = run(recipes, dietary_ladder, diet="keto")
    (item,) = run(recipes, dietary_ladder, protein="unicorn")
    assert (diet.type, diet.no_store, item.type, item.no_store) == (
        "UNKNOWN_DIET",
        True,
        "UNKNOWN_INGREDIENT",
        True,
    )


def test_a_forbidden_ingredient_without_a_listed_substitute_is_refused_without_a_fix(recipes):
    registry = recipes.domain.registry()
    rows = registry.state.snapshot("substitutions").plain_rows()
    del rows["ricotta"]
    registry.reload("substitutions", rows)
    _, (s,), _ = ask(recipes, recipes.family("vegan-lasagna").draft(), registry)
    assert (s.type, s.parameters, s.cache_hint) == ("SUBSTITUTE_FOR_DIET", {}, CacheHint.NO_STORE)


def test_a_category_with_no_certified_brand_left_is_refused_without_a_fix(recipes):
    registry = recipes.domain.registry()
    rows = registry.state.snapshot("celiac_safe_brands").plain_rows()
    rows["pasta"]["certified"] = []
    registry.reload("celiac_safe_brands", rows)
    _, (s,), _ = ask(recipes, recipes.family("celiac-penne").draft(), registry)
    assert (s.type, s.parameters, s.cache_hint) == (
        "USE_CERTIFIED_CELIAC_BRAND",
        {},
        CacheHint.NO_STORE,
    )


def test_celiac_rung_requires_a_certified_brand(recipes):
    (v,) = run(recipes, celiac_certification, diet="vegan_celiac", starch="sunmill_gf_penne")
    assert (
        dict(v.parameters) == {"starch": "goldenfield_rice_penne"}
        and v.table == "celiac_safe_brands"
    )
    assert (
        run(recipes, celiac_certification, diet="vegan_celiac", starch="riverstone_corn_penne")
        == []
    )
    assert (
        run(recipes, celiac_certification, diet="vegan_gluten_free", starch="sunmill_gf_penne")
        == []
    )


def test_celiac_fix_depends_on_its_category_row_only(recipes):
    fix = first_fix(recipes, "celiac-penne")
    assert {k for t, k in dependency_keys(fix) if t == "celiac_safe_brands"} == {"pasta"}
    assert list(REQUIRES_CERTIFICATION) in map(list, fix.rules)


def test_incompatible_pair_replaces_the_ingredient_the_table_names(recipes):
    (v,) = run(recipes, incompatible_combinations, dairy="oat_cream", thickener="arrowroot")
    assert dict(v.parameters) == {"thickener": "tapioca_starch"} and dict(v.precondition) == {
        "thickener": "arrowroot"
    }
    assert run(recipes, incompatible_combinations, dairy="oat_cream", thickener="cornstarch") == []


def test_incompatible_fix_depends_on_every_pair_it_looked_up(recipes):
    fix = first_fix(recipes, "incompatible-cream-sauce")
    draft = recipes.family("incompatible-cream-sauce").fields
    names = [draft[s] for s in ("protein", "starch", "dairy", "thickener")]
    pairs = {combination_key(a, b) for i, a in enumerate(names) for b in names[i + 1 :]}
    assert dependency_keys(fix) == {("incompatible_combinations", key) for key in pairs}


def test_the_ladder_is_a_chain_of_three_includes(recipes):
    listing = recipes.domain.registry().state.graph_listing()
    includes = [e for e in listing.edges if e.relation == "includes"]
    assert len(includes) == 3 and longest_chain(listing) == 3


def test_breaking_drift_withdraws_the_certified_brand_the_celiac_fix_names(recipes):
    registry = recipes.domain.registry()
    celiac = first_fix(recipes, "celiac-penne", registry)
    control = first_fix(recipes, "celiac-gravy-control", registry)
    result = load(registry, recipes, "celiac_safe_brands.breaking")
    assert result.diff.changed == ["pasta"] and not result.diff.added and not result.diff.removed
    assert not recipes.is_fix_current(celiac, recipes.family("celiac-penne").fields, registry.state)
    assert recipes.is_fix_current(
        control, recipes.family("celiac-gravy-control").fields, registry.state
    )


def test_injecting_the_stale_celiac_fix_fails_with_the_remaining_brand(recipes):
    registry = recipes.domain.registry()
    old = first_fix(recipes, "celiac-penne", registry)
    load(registry, recipes, "celiac_safe_brands.breaking")
    status, (new,), _ = ask(recipes, applied(recipes.family("celiac-penne").draft(), old), registry)
    assert status == 422 and new.parameters == {"starch": "riverstone_corn_penne"}


def test_benign_drift_changes_no_row_any_cached_fix_depends_on(recipes):
    registry = recipes.domain.registry()
    memory = {fid: first_fix(recipes, fid, registry) for fid in FIXED_FAMILIES}
    result = load(registry, recipes, "incompatible_combinations.benign")
    changed = {(result.table, key) for key in result.diff.keys}
    assert result.diff and result.new_version != result.old_version
    assert all(not dependency_keys(s) & changed for s in memory.values())
    assert all(
        recipes.is_fix_current(s, recipes.family(fid).fields, registry.state)
        for fid, s in memory.items()
    )
    assert any(d.table == result.table for d in memory["incompatible-cream-sauce"].tables)
