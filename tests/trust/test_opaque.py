"""Schema disclosure: opaque tags instead of table names, row keys and relations, on every route.

Exposure (paper §6.5): ``table`` names server-side tables on every suggestion, ``keys`` name their
rows, and the L5 graph publishes the derivation structure — precise invalidation bought with
schema disclosure. Defence: ``TrustOptions(opaque_key=...)`` sends keyed HMAC tags in their place,
consistently across responses, the changes feed, the graph and the rules, so an unchanged
row-level client still evicts exactly the stale entry while learning nothing of the schema.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from trust_helpers import (
    CATALOG,
    FUNDING,
    GROWTH,
    OPERATION,
    ORIGIN,
    PLAIN,
    ROUTE,
    STARTER,
    TOKEN,
    Session,
    acme_app,
    asgi,
    rotate_growth_code,
)

from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.client.events import Evicted, Restamped
from invalidation_contracts.client.memory import FixMemory
from invalidation_contracts.protocol import ProblemType, Suggestion
from invalidation_contracts.server import Rule
from invalidation_contracts.server.opaque import OpaqueNames
from invalidation_contracts.server.trust import TrustOptions

SECRET = b"opaque-names-test-secret"
TABLES = {name: list(spec.rows) for name, spec in CATALOG.domain.tables.items()}
RELATIONS = sorted({rule.relation for rule in CATALOG.domain.rules})
CONTRACT_ROUTES = (
    "/contract/versions",
    "/contract/changes?since=0",
    "/contract/graph",
    "/contract/rules",
    "/contract/changes?since=99",
)


def opaque_app(secret: bytes = SECRET):
    return acme_app(trust=TrustOptions(opaque_key=secret))


def call(app, method: str, path: str, **kwargs) -> httpx.Response:
    async def go():
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=ORIGIN
        ) as client:
            return await client.request(method, path, **kwargs)

    return asyncio.run(go())


def every_answer(app) -> list[httpx.Response]:
    """A tour of the API: fixes of each kind, a bad request, a drift, and every contract route."""
    answers = [call(app, "POST", ROUTE, json=body) for body in (GROWTH, FUNDING, STARTER, PLAIN)]
    answers.append(call(app, "POST", ROUTE, json={"plan": "x"}))
    rotate_growth_code(app)
    answers.append(call(app, "POST", ROUTE, json=GROWTH, headers={"Contract-Since": "0"}))
    answers += [call(app, "GET", path) for path in CONTRACT_ROUTES]
    return answers


def test_no_table_name_or_relation_appears_in_any_response_body():
    answers = every_answer(opaque_app())
    real_rules_version = CATALOG.domain.registry().state.rules.version

    assert {a.status_code for a in answers} == {200, 410, 422}
    for answer in answers:
        for name in [*TABLES, *RELATIONS, real_rules_version]:
            assert name not in answer.text, (answer.request.url, name)


def test_without_the_option_the_same_tour_names_the_schema():
    text = "".join(a.text for a in every_answer(acme_app()))

    assert all(name in text for name in TABLES)


def test_no_row_key_appears_in_the_contract_fields_of_a_domain_response():
    answers = every_answer(opaque_app())[:6]
    keys = {key for rows in TABLES.values() for key in rows}

    for answer in answers:
        body = answer.json()
        contract = {
            "table_versions": body.get("table_versions"),
            "dependencies": [
                {"table": s.get("table"), "tables": s.get("tables"), "rules": s.get("rules")}
                for s in (body.get("recovery_feedback") or {}).get("suggestions", [])
            ],
        }
        text = json.dumps(contract)
        assert not [key for key in keys if f'"{key}"' in text]


@pytest.mark.parametrize("path", CONTRACT_ROUTES)
def test_no_row_key_appears_anywhere_on_the_contract_routes(path):
    app = opaque_app()
    rotate_growth_code(app)
    text = call(app, "GET", path).text

    assert not [key for rows in TABLES.values() for key in rows if key in text]


def test_a_row_level_client_evicts_exactly_the_stale_entry_through_the_tagged_feed():
    app = opaque_app()
    session = Session(FixMemory("row"), asgi(app))
    for body in (GROWTH, STARTER, FUNDING):
        session.post(body)
    rotate_growth_code(app)
    session.post(PLAIN)

    (evicted,) = session.of(Evicted)
    assert evicted.reason is EvictionReason.ROW_CHANGED
    assert evicted.key.scope_fields == {"plan": "plan_partner_growth"}
    assert {r.key.scope_fields["plan"] for r in session.of(Restamped)} == {"plan_partner_starter"}
    assert len(session.memory.entries(ORIGIN)) == 2
    session.post(GROWTH)
    assert [
        e.suggestion.parameters
        for e in session.memory.lookup(ORIGIN, GROWTH, operation=OPERATION).entries
    ] == [{"promo_code": "WINTERLAUNCH26"}]


def test_a_rules_client_disposes_of_fixes_by_tagged_rule_triples():
    app = opaque_app()
    session = Session(FixMemory("rules-oracle"), asgi(app))
    session.post(GROWTH)
    session.post(FUNDING)
    remaining = [r for r in CATALOG.domain.rules if r.relation != "assigned_by_csm"]
    app.state.registry.set_rules(Rule.from_declaration(r.to_declaration()) for r in remaining)
    session.post(PLAIN)

    (evicted,) = session.of(Evicted)
    assert (evicted.key.type, evicted.reason) == ("ADD_REQUIRED_PROMO_CODE", EvictionReason.RULES)
    assert [e.key.type for e in session.memory.entries(ORIGIN)] == ["USE_REQUIRED_FUNDING_TYPE"]


def test_tags_are_stable_for_a_secret_and_differ_between_secrets():
    first = call(opaque_app(), "GET", "/contract/versions").json()["table_versions"]
    again = call(opaque_app(), "GET", "/contract/versions").json()["table_versions"]
    other = call(opaque_app(b"another-secret-of-24-byte"), "GET", "/contract/versions").json()

    assert first == again
    assert set(first).isdisjoint(other["table_versions"])


def test_the_feed_filters_by_tag_and_does_not_confirm_a_guessed_name():
    app = opaque_app()
    rotate_growth_code(app)
    tag = OpaqueNames(SECRET).table("active_csm_codes")

    tagged = call(app, "GET", f"/contract/changes?since=0&tables={tag}")
    guessed = call(app, "GET", "/contract/changes?since=0&tables=active_csm_codes")

    assert [t["table"] for t in tagged.json()["tables"]] == [tag]
    assert guessed.status_code == 404
    assert guessed.json()["type"] == ProblemType.UNKNOWN_TABLE.uri


def test_admin_routes_keep_the_real_names_for_the_operator():
    app = opaque_app()
    snapshot = app.state.registry.state.tables["active_csm_codes"]

    result = call(
        app,
        "POST",
        "/admin/reload-table",
        json={"table": "active_csm_codes", "rows": snapshot.plain_rows(), "version": "1.0.1"},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )

    assert result.json()["table"] == "active_csm_codes" and result.json()["touch"] is True


def test_equal_keys_in_two_tables_get_unrelated_tags():
    names = OpaqueNames(SECRET)

    assert names.row("active_csm_codes", "plan_partner_growth") != names.row(
        "required_promo_policy", "plan_partner_growth"
    )
    assert names.node("active_csm_codes:plan_partner_growth") == (
        f"{names.table('active_csm_codes')}:{names.row('active_csm_codes', 'plan_partner_growth')}"
    )


def test_a_short_secret_is_refused():
    with pytest.raises(ValueError, match="16 bytes"):
        OpaqueNames(b"short")


def test_a_key_set_dependency_is_tagged_like_row_keys():
    names = OpaqueNames(SECRET)
    plain = Suggestion.model_validate(
        {
            "type": "T",
            "parameters": {},
            "action": "add_field",
            "tables": [{"table": "cards", "version": "1", "membership": {"keys": ["c9"]}}],
        }
    )
    [dep] = names.suggestion(plain).tables or []
    assert dep.table == names.table("cards")
    assert dep.membership is not None and dep.membership.keys == [names.row("cards", "c9")]
    assert dep.keys is None
