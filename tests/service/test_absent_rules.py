"""A fix that holds because a rule is absent depends on that absence (DESIGN.md §7, issue F1).

End to end: the real app (ASGI), the shipped async transport and memory. A policy lifts a
constraint while a rule is declared; the fix learned while it is absent must go when
``POST /admin/rules`` declares it, under every rules strategy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.httpx import async_contract_client
from invalidation_contracts.protocol import Action, Level, Suggestion
from invalidation_contracts.server import (
    Domain,
    Provider,
    Route,
    Rule,
    TableSpec,
    TrackedTables,
    Violation,
    policy,
)
from invalidation_contracts.server.http.app import create_app
from invalidation_contracts.server.opaque import OpaqueNames
from invalidation_contracts.server.trust import TrustOptions

TOKEN = "s3cret-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
BASE = "http://shop.test"
ORDERS = "POST /v1/orders"  # the operation the transport files the fixes under
ALLOWS_INVOICE = ("plans", "funding_types", "allows_invoice")
FUNDED_BY = ("plans", "funding_types", "funded_by")
STALE_DRAFT = {"plan": "basic", "funding_type": "invoice"}
RULES_STRATEGIES = ["rules-oracle", "rules-stamp", "rules-stamp+vectors"]


class Order(BaseModel):
    plan: str
    funding_type: str


@policy("funding_policy")
def funding_policy(request: Mapping[str, Any], tables: TrackedTables) -> Violation | None:
    """A plan is paid with its funding type, or by invoice while ``allows_invoice`` is declared."""
    plan = tables["plans"].get(request["plan"])
    if plan is None:
        return None
    allowed = {plan["funding"]}
    if tables.rules.declares(*ALLOWS_INVOICE):
        allowed.add("invoice")
    if request["funding_type"] in allowed:
        return None
    return Violation(
        "USE_PLAN_FUNDING",
        f"plan {request['plan']} is paid by {plan['funding']}",
        {"funding_type": plan["funding"]},
        Action.REWRITE_VALUE,
        scope={"plan": request["plan"]},
    )


DOMAIN = Domain(
    "shop",
    {
        "plans": TableSpec({"basic": {"funding": "card"}, "gold": {"funding": "card"}}),
        "funding_types": TableSpec({"card": {}, "invoice": {}, "wire": {}}),
    },
    [Rule(*FUNDED_BY, via="funding")],
    [Route("/v1/orders", Order, [funding_policy])],
)


async def learn_then_declare(strategy: str, trust: TrustOptions | None = None) -> FixMemory:
    """Learn the invoice fix while the rule is absent, declare the rule, then send one request."""
    app = create_app(DOMAIN, admin_token=TOKEN, trust=trust)
    memory = FixMemory(strategy)
    asgi = httpx.ASGITransport(app)
    async with (
        async_contract_client(memory, transport=asgi, base_url=BASE) as agent,
        httpx.AsyncClient(transport=asgi, base_url=BASE) as operator,
    ):
        learned = await agent.post("/v1/orders", json=STALE_DRAFT)
        assert learned.status_code == 422
        [fix] = learned.json()["recovery_feedback"]["suggestions"]
        assert len(fix["absent_rules"]) == 1
        assert [e.type for e in memory.lookup(BASE, STALE_DRAFT, operation=ORDERS).entries] == [
            "USE_PLAN_FUNDING"
        ]

        rules = [
            {"from_table": a, "to_table": b, "relation": r}
            for a, b, r in (FUNDED_BY, ALLOWS_INVOICE)
        ]
        declared = await operator.post("/admin/rules", headers=ADMIN, json={"rules": rules})
        assert declared.json()["added"] == [list(ALLOWS_INVOICE)]
        # Invoice is allowed now: the cached "use card" fix is stale.
        assert (await operator.post("/v1/orders", json=STALE_DRAFT)).status_code == 200

        # The next response (another plan's failure of the same type) carries the new stamp.
        await agent.post("/v1/orders", json={"plan": "gold", "funding_type": "wire"})
    return memory


@pytest.mark.parametrize("strategy", RULES_STRATEGIES)
def test_declaring_a_rule_a_fix_found_absent_evicts_the_fix(strategy):
    memory = asyncio.run(learn_then_declare(strategy))

    assert list(memory.lookup(BASE, STALE_DRAFT, operation=ORDERS).entries) == []
    [tombstone] = [t for t in memory.tombstones(BASE) if t.entry.scope == {"plan": "basic"}]
    assert tombstone.reason is EvictionReason.RULES


@pytest.mark.parametrize("strategy", ["row", "row+graph"])
def test_strategies_that_do_not_read_rules_keep_the_fix(strategy):
    memory = asyncio.run(learn_then_declare(strategy))

    assert [e.type for e in memory.lookup(BASE, STALE_DRAFT, operation=ORDERS).entries] == [
        "USE_PLAN_FUNDING"
    ]


def test_absent_rules_ride_with_the_dependency_vector_from_level_four():
    route = DOMAIN.routes[0]
    structured = Provider(DOMAIN, level=Level.STRUCTURED).handle(route, STALE_DRAFT)
    vectors = Provider(DOMAIN, level=Level.DEPENDENCY_VECTORS).handle(route, STALE_DRAFT)

    [l1] = structured.body.to_wire()["recovery_feedback"]["suggestions"]
    [l4] = vectors.body.to_wire()["recovery_feedback"]["suggestions"]
    assert "absent_rules" not in l1 and "rules" not in l1
    assert l4["absent_rules"] == [list(ALLOWS_INVOICE)]
    assert "rules" not in l4


def test_opaque_names_tag_absent_rule_lookups_and_keep_wildcards():
    names = OpaqueNames(b"opaque-names-test-secret")
    suggestion = Suggestion(
        type="FIX",
        parameters={},
        action=Action.ADD_FIELD,
        absent_rules=[ALLOWS_INVOICE, ("plans", None, None)],
    )

    tagged = names.suggestion(suggestion).absent_rules

    assert set(tagged) == {names.pattern(ALLOWS_INVOICE), (names.table("plans"), None, None)}
    assert names.pattern(ALLOWS_INVOICE) == (
        names.table("plans"),
        names.table("funding_types"),
        names.relation("allows_invoice"),
    )


def test_a_rules_client_behind_opaque_names_evicts_the_fix_by_its_tagged_lookup():
    memory = asyncio.run(
        learn_then_declare("rules-oracle", trust=TrustOptions(opaque_key=b"0123456789abcdef"))
    )

    assert list(memory.lookup(BASE, STALE_DRAFT, operation=ORDERS).entries) == []
