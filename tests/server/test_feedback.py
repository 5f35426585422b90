import pytest
from pydantic import BaseModel

from invalidation_contracts.protocol import Action, Level
from invalidation_contracts.server import (
    Asked,
    Domain,
    Provider,
    Route,
    TableSpec,
    Violation,
    policy,
)

GOVERNED = {"plan": "growth", "payment_method_token": "tok_credit"}
FUNDING = {"plan": "basic", "payment_method_token": "tok_debit"}


def suggestions(outcome):
    return outcome.body.to_wire()["recovery_feedback"]["suggestions"]


def handle(domain, payload, level=Level.RULES_FINGERPRINT, **kw):
    return Provider(domain, level=level).handle(domain.routes[0], payload, **kw)


def test_level_zero_sends_prose_and_no_contract(domain):
    body = handle(domain, GOVERNED, Level.RAW).body.to_wire()
    assert body["status"] == 422 and "promo code" in body["detail"]
    assert "recovery_feedback" not in body and "table_versions" not in body


def test_level_one_suggestion_names_only_its_primary_table(domain):
    outcome = handle(domain, GOVERNED, Level.STRUCTURED)
    (s,) = suggestions(outcome)
    assert s["cache_hint"] == "cacheable" and s["table"] == "active_csm_codes"
    assert "tables" not in s
    assert outcome.body.table_versions["active_csm_codes"] == "1.0.0"
    assert outcome.body.rules_version is None


@pytest.mark.parametrize("level", [Level.PATCH_PROTOCOL, Level.AMENDED_INPUT])
def test_consumption_levels_emit_the_level_one_wire_byte_for_byte(domain, level):
    registry = domain.registry()
    consumption = Provider(domain, registry, level).handle(domain.routes[0], GOVERNED)
    structured = Provider(domain, registry, Level.STRUCTURED).handle(domain.routes[0], GOVERNED)
    assert consumption.body.to_wire() == structured.body.to_wire()


def test_level_four_adds_the_dependency_vector_with_row_keys(domain):
    (s,) = suggestions(handle(domain, FUNDING, Level.DEPENDENCY_VECTORS))
    assert s["tables"] == [
        {"table": "token_funding_map", "version": "1.0.0", "keys": ["tok_debit"]},
        {"table": "recommended_credit_token", "version": "1.0.0", "keys": ["default"]},
    ]
    assert s["table"] == "recommended_credit_token"


def test_level_six_adds_the_rules_fingerprint_to_success_too(domain):
    provider = Provider(domain, level=Level.RULES_FINGERPRINT)
    ok = provider.handle(domain.routes[0], {**GOVERNED, "promo_code": "S25"})
    assert ok.status == 200 and ok.body.rules_version == provider.registry.state.rules.version


def test_a_fix_that_read_no_table_is_recompute_without_table(domain):
    (s,) = suggestions(handle(domain, {**GOVERNED, "promo_code": "S25", "amount_cents": 150}))
    assert s["cache_hint"] == "recompute" and "table" not in s and "tables" not in s


def test_add_field_fix_becomes_an_add_patch(domain):
    (s,) = suggestions(handle(domain, GOVERNED))
    assert s["patch"] == [{"op": "add", "path": "/promo_code", "value": "S25"}]
    assert s["scope"] == {"plan": "growth"}


def test_conditional_rewrite_patch_tests_its_precondition_first(domain):
    (s,) = suggestions(handle(domain, FUNDING))
    assert s["patch"] == [
        {"op": "test", "path": "/payment_method_token", "value": "tok_debit"},
        {"op": "replace", "path": "/payment_method_token", "value": "tok_credit"},
    ]


def test_no_patch_is_published_for_fields_outside_the_patchable_set(domain):
    from dataclasses import replace

    narrow = replace(
        domain, routes=[replace(domain.routes[0], patchable=frozenset({"amount_cents"}))]
    )
    (s,) = suggestions(handle(narrow, GOVERNED))
    assert "patch" not in s


def test_conditional_contract_sends_only_tables_changed_since(domain):
    provider = Provider(domain)
    provider.registry.reload(
        "token_funding_map", {"tok_debit": {"funding": "debit"}}, version="1.0.1"
    )
    outcome = provider.handle(domain.routes[0], GOVERNED, Asked(since=0))
    assert outcome.body.table_versions == {"token_funding_map": "1.0.1"}


def test_conditional_contract_omits_what_did_not_move_since(domain):
    provider = Provider(domain)
    provider.registry.reload(
        "token_funding_map", {"tok_debit": {"funding": "debit"}}, version="1.0.1"
    )
    epoch = provider.registry.state.epoch
    body = provider.handle(domain.routes[0], GOVERNED, Asked(since=1, epoch=epoch)).body.to_wire()
    for absent in ("table_versions", "rules_version", "contract_seq", "contract_epoch"):
        assert absent not in body


def test_conditional_contract_names_the_epoch_when_the_client_knows_another(domain):
    provider = Provider(domain)
    body = provider.handle(domain.routes[0], GOVERNED, Asked(since=0, epoch="not-this-one")).body
    assert body.contract_epoch == provider.registry.state.epoch


def test_conditional_contract_sends_the_seq_when_the_client_is_behind(domain):
    provider = Provider(domain)
    provider.registry.reload(
        "token_funding_map", {"tok_debit": {"funding": "debit"}}, version="1.0.1"
    )
    assert provider.handle(domain.routes[0], GOVERNED, Asked(since=0)).body.contract_seq == 1


def test_conditional_contract_sends_the_rules_version_only_after_a_rule_change(domain):
    provider = Provider(domain)
    assert provider.handle(domain.routes[0], GOVERNED, Asked(since=0)).body.rules_version is None
    provider.registry.set_rules([])
    changed = provider.handle(domain.routes[0], GOVERNED, Asked(since=0)).body
    assert changed.rules_version == provider.registry.state.rules.version
    assert provider.handle(domain.routes[0], GOVERNED, Asked(since=1)).body.rules_version is None


def test_conditional_suggestions_leave_out_table_when_they_carry_tables(domain):
    (s,) = suggestions(Provider(domain).handle(domain.routes[0], FUNDING, Asked(since=0)))
    assert "table" not in s and s["tables"][0]["table"] == "token_funding_map"


def test_schema_mismatch_is_an_invalid_request_problem_with_contract_fields(domain):
    body = handle(domain, {"plan": 3}).body.to_wire()
    assert body["type"].endswith("invalid-request") and body["status"] == 422
    assert {e["loc"][0] for e in body["errors"]} == {"plan", "payment_method_token"}
    assert "table_versions" in body


def test_a_refusal_names_the_asked_instance_and_builds_it_only_when_it_refuses(domain):
    built: list[str] = []

    def instance() -> str:
        built.append("/v1/charges")
        return "/v1/charges"

    provider = Provider(domain, level=Level.RULES_FINGERPRINT)
    passed = provider.handle(
        domain.routes[0], {**GOVERNED, "promo_code": "S25"}, Asked(0, None, instance)
    )
    assert passed.status == 200 and built == []
    refused = provider.handle(domain.routes[0], GOVERNED, Asked(0, None, instance))
    assert refused.status == 422 and refused.body.instance == "/v1/charges"
    assert built == ["/v1/charges"]


def test_suggestion_versions_come_from_the_same_state_as_the_stamps(domain):
    provider = Provider(domain, level=Level.DEPENDENCY_VECTORS)
    for i in range(3):
        outcome = provider.handle(domain.routes[0], FUNDING)
        provider.registry.reload(
            "recommended_credit_token", {"default": {"token": "tok_credit"}}, version=f"1.0.{i + 1}"
        )
        (s,) = suggestions(outcome)
        assert all(outcome.body.table_versions[d["table"]] == d["version"] for d in s["tables"])


def test_the_oracle_judges_each_fix_of_one_type_by_its_scope(domain):
    from dataclasses import replace

    from invalidation_contracts.domains.catalog import is_fix_current
    from invalidation_contracts.protocol import Action
    from invalidation_contracts.server import Violation, policy

    @policy("two_of_a_kind")
    def two(request, tables):
        tables["active_csm_codes"].get("growth")
        return [
            Violation(
                "SAME",
                "first",
                {"promo_code": "A"},
                Action.ADD_FIELD,
                scope={"plan": request["plan"], "slot": 1},
            ),
            Violation(
                "SAME",
                "second",
                {"amount_cents": 200},
                Action.REWRITE_VALUE,
                scope={"plan": request["plan"], "slot": 2},
            ),
        ]

    route = replace(domain.routes[0], policies=[two])
    provider = Provider(replace(domain, routes=[route]))
    first, second = suggestions(provider.handle(route, GOVERNED))
    from invalidation_contracts.protocol import Suggestion

    state = provider.registry.state
    assert is_fix_current(route, GOVERNED, Suggestion.model_validate(first), state)
    assert is_fix_current(route, GOVERNED, Suggestion.model_validate(second), state)
    stale = Suggestion.model_validate({**second, "parameters": {"amount_cents": 300}})
    assert not is_fix_current(route, GOVERNED, stale, state)


class Pay(BaseModel):
    card: str


def test_a_key_set_read_rides_as_membership_and_leaves_keys_out():
    @policy("registered_cards")
    def registered(request, tables):
        cards = tables["cards"]
        if request["card"] in cards:
            return None
        listed = sorted(cards)
        return Violation(
            "USE_REGISTERED_CARD",
            f"card not registered; registered cards: {', '.join(listed)}",
            {"card": listed[0]},
            Action.REWRITE_VALUE,
            scope={"card": request["card"]},
        )

    cards = {"c1": {"limit": 5}, "c2": {"limit": 9}}
    dom = Domain("wallet", {"cards": TableSpec(cards)}, [], [Route("/v1/pay", Pay, [registered])])
    provider = Provider(dom, level=Level.DEPENDENCY_VECTORS)
    body = provider.handle(dom.routes[0], {"card": "c9"}).body.to_wire()
    [fix] = body["recovery_feedback"]["suggestions"]
    assert fix["tables"] == [{"table": "cards", "version": "1.0.0", "membership": {"keys": ["c9"]}}]
