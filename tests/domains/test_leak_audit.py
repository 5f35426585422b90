"""No fix value any policy can emit, in any snapshot, appears in a task or the system prompt."""

import dataclasses

import pytest
from pydantic import Field, create_model

from invalidation_contracts.domains import get_catalog
from invalidation_contracts.domains.audit import audit, fix_values
from invalidation_contracts.domains.catalog import DomainCatalog


def with_changes(catalog, family_id=None, system_prompt=None, **family_changes):
    families = dict(catalog.task_families)
    if family_id is not None:
        families[family_id] = dataclasses.replace(families[family_id], **family_changes)
    return DomainCatalog(
        domain=catalog.domain,
        system_prompt=system_prompt or catalog.system_prompt,
        task_families=families,
        snapshots=catalog.snapshots,
        route=catalog.route,
        rule_sets=catalog.rule_sets,
    )


@pytest.mark.parametrize("name", ["acme_billing", "acme_rules", "recipes"])
def test_no_task_or_system_prompt_leaks_a_fix_value(name):
    assert audit(get_catalog(name)) == []


def test_fix_values_cover_every_snapshot_and_neighbouring_draft(acme):
    values = fix_values(acme)
    assert {"SUMMERSALE25", "WINTERLAUNCH26", "SPRINGRENEW27", "AUTUMNBOOST28"} <= values
    assert {"acme_pm_visa_credit", "acme_pm_mc_credit", 5000} <= values


def test_recipe_fix_values_include_the_brand_left_after_the_breaking_drift(recipes):
    assert {"goldenfield_rice_penne", "riverstone_corn_penne", "tapioca_starch"} <= fix_values(
        recipes
    )


def test_a_fix_value_in_a_task_text_is_reported(acme):
    family = acme.family("plain-starter-monthly")
    leaky = with_changes(acme, family.id, text=family.text + " Remember code winterlaunch26.")
    assert [str(leak) for leak in audit(leaky)] == [
        "fix value 'WINTERLAUNCH26' appears in the text of task family plain-starter-monthly"
    ]


def test_a_fix_value_in_task_fields_is_reported(recipes):
    family = recipes.family("plain-vegan-curry")
    leaky = with_changes(
        recipes, family.id, fields={**family.fields, "thickener": "tapioca_starch"}
    )
    assert "the fields of task family plain-vegan-curry" in {leak.where for leak in audit(leaky)}


def test_a_spelled_out_fix_value_in_the_system_prompt_is_reported(recipes):
    leaky = with_changes(recipes, system_prompt=recipes.system_prompt + " Prefer black beans.")
    assert [(leak.value, leak.where) for leak in audit(leaky)] == [
        ("black_beans", "the system prompt")
    ]


def test_a_number_inside_a_longer_number_is_not_a_leak(acme):
    family = acme.family("plain-starter-monthly")
    assert audit(with_changes(acme, family.id, text=family.text + " Reference 150000.")) == []


def test_a_value_inside_a_longer_code_or_id_is_not_a_leak(acme):
    family = acme.family("plain-starter-monthly")
    text = family.text + " Ticket SUMMERSALE250 and token acme_pm_visa_credit_v2."
    assert audit(with_changes(acme, family.id, text=text)) == []


def test_a_whole_value_next_to_punctuation_is_a_leak(acme):
    family = acme.family("plain-starter-monthly")
    leaky = with_changes(acme, family.id, text=family.text + " (code: SUMMERSALE25).")
    assert [leak.value for leak in audit(leaky)] == ["SUMMERSALE25"]


def with_schema_description(catalog, field, text):
    """The catalog with ``field``'s description in the request schema replaced by ``text``."""
    base = catalog.route.request_model
    info = base.model_fields[field]
    leaky = create_model(
        f"Leaky{base.__name__}",
        __base__=base,
        **{field: (info.annotation, Field(info.default, description=text))},
    )
    return dataclasses.replace(
        catalog, route=dataclasses.replace(catalog.route, request_model=leaky)
    )


@pytest.mark.parametrize("name", ["acme_billing", "acme_rules", "recipes"])
def test_the_request_schema_names_no_task_or_fix_value(name):
    catalog = get_catalog(name)
    assert [leak for leak in audit(catalog) if leak.where == "the request schema"] == []


def test_an_example_id_a_task_uses_in_the_schema_is_reported(acme):
    # The description the acme schema carried before: small models copied this plan id.
    leaky = with_schema_description(acme, "plan", "The plan id, e.g. plan_starter_monthly.")
    assert [str(leak) for leak in audit(leaky)] == [
        "task value 'plan_starter_monthly' appears in the request schema"
    ]


def test_a_fix_value_in_the_schema_is_reported(acme):
    leaky = with_schema_description(acme, "promo_code", "A promotional code such as SUMMERSALE25.")
    assert [(leak.kind, leak.value) for leak in audit(leaky)] == [("fix value", "SUMMERSALE25")]
