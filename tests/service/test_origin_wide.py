"""Origin-wide fixes (SPEC §5.2 `origin_wide`, threat model T19): a policy declares a fix valid
for every draft of its route; the wire says so; the memory keeps and serves it under that rule,
within the trust policy's bounds, and drops it when what it read changes.

End to end: the real app (ASGI) and the shipped async transport and memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from invalidation_contracts.client import FixMemory, InMemoryStore, TrustPolicy
from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.client.events import NotStored, Quarantined
from invalidation_contracts.client.values import Observed
from invalidation_contracts.httpx import async_contract_client
from invalidation_contracts.protocol import Action
from invalidation_contracts.server import (
    Domain,
    Provider,
    Route,
    TableSpec,
    TrackedTables,
    Violation,
    policy,
)
from invalidation_contracts.server.http.app import create_app

TOKEN = "s3cret-admin-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
BASE = "http://travel.test"
BOOK = "POST /v1/bookings"
QUOTE = "POST /v1/quotes"


class Booking(BaseModel):
    traveller: str
    currency: str = "USD"


@policy("house_currency")
def house_currency(request: Mapping[str, Any], tables: TrackedTables) -> Violation | None:
    """Every booking is priced in the house currency, whoever travels: an origin-wide fix."""
    house = tables["settings"]["currency"]["code"]
    if request["currency"] == house:
        return None
    return Violation(
        "USE_HOUSE_CURRENCY",
        f"bookings are priced in {house}",
        {"currency": house},
        Action.REWRITE_VALUE,
        origin_wide=True,
    )


DOMAIN = Domain(
    "travel",
    {"settings": TableSpec({"currency": {"code": "EUR"}, "brand": {"name": "Away"}})},
    [],
    [
        Route("/v1/bookings", Booking, [house_currency]),
        Route("/v1/quotes", Booking, [house_currency]),
    ],
)


async def session(
    memory: FixMemory, *steps: tuple[str, str, dict[str, Any]], app: Any = None
) -> list[Any]:
    """Run ``(who, path, body)`` steps: who is ``agent`` (through the memory) or ``admin``."""
    app = app if app is not None else create_app(DOMAIN, admin_token=TOKEN)
    asgi = httpx.ASGITransport(app)
    out = []
    async with (
        async_contract_client(memory, transport=asgi, base_url=BASE) as agent,
        httpx.AsyncClient(transport=asgi, base_url=BASE, headers=ADMIN) as admin,
    ):
        for who, path, body in steps:
            out.append(await (agent if who == "agent" else admin).post(path, json=body))
    return out


def test_the_wire_marks_the_fix_origin_wide_and_gives_it_no_scope():
    [answer] = asyncio.run(session(FixMemory("row"), ("agent", "/v1/bookings", {"traveller": "a"})))

    [fix] = answer.json()["recovery_feedback"]["suggestions"]
    assert fix["origin_wide"] is True
    assert "scope" not in fix


def test_an_origin_wide_fix_is_served_to_any_draft_of_its_route_and_no_other():
    memory = FixMemory("row")
    asyncio.run(session(memory, ("agent", "/v1/bookings", {"traveller": "ada"})))

    other = {"traveller": "grace", "currency": "GBP"}
    assert [e.type for e in memory.lookup(BASE, other, operation=BOOK).entries] == [
        "USE_HOUSE_CURRENCY"
    ]
    assert list(memory.lookup(BASE, other, operation=QUOTE).entries) == []


def test_a_changed_row_it_read_evicts_it_and_an_unread_row_does_not():
    memory, app = FixMemory("row"), create_app(DOMAIN, admin_token=TOKEN)
    brand = {"table": "settings", "upsert": {"brand": {"name": "Elsewhere"}}}
    currency = {"table": "settings", "upsert": {"currency": {"code": "CHF"}}}
    asyncio.run(
        session(
            memory,
            ("agent", "/v1/bookings", {"traveller": "ada"}),
            ("admin", "/admin/patch-table", brand),
            ("agent", "/v1/bookings", {"traveller": "ada", "currency": "EUR"}),
            app=app,
        )
    )
    assert [e.type for e in memory.entries(BASE)] == ["USE_HOUSE_CURRENCY"]

    asyncio.run(
        session(
            memory,
            ("admin", "/admin/patch-table", currency),
            ("agent", "/v1/bookings", {"traveller": "ada", "currency": "CHF"}),
            app=app,
        )
    )
    assert list(memory.lookup(BASE, {"traveller": "x"}, operation=BOOK).entries) == []
    [tombstone] = memory.tombstones(BASE)
    assert tombstone.reason is EvictionReason.ROW_CHANGED


def test_a_trust_policy_that_keeps_no_origin_wide_fixes_refuses_it():
    memory = FixMemory("row", trust=TrustPolicy(allow_origin_wide=False))
    draft = {"traveller": "ada", "currency": "USD"}
    body = Provider(DOMAIN).handle(DOMAIN.routes[0], draft).body.to_wire()

    obs = memory.observe(BASE, Observed(draft, 422, body), operation=BOOK)

    assert [e.reason for e in obs.of(NotStored)] == [
        "refused: the trust policy does not keep origin-wide fixes"
    ]
    assert memory.entries(BASE) == []


@pytest.mark.parametrize("allowed", [["/traveller"], []], ids=["other-path", "no-path"])
def test_the_parameter_guard_still_bounds_an_origin_wide_fix(allowed):
    memory = FixMemory("row", trust=TrustPolicy(guard_parameters=True))
    memory.set_patchable(BASE, allowed)
    asyncio.run(session(memory, ("agent", "/v1/bookings", {"traveller": "ada"})))

    assert memory.entries(BASE) == []


def test_a_stored_origin_wide_fix_is_quarantined_once_the_trust_policy_refuses_them():
    store = InMemoryStore()
    asyncio.run(
        session(FixMemory("row", store=store), ("agent", "/v1/bookings", {"traveller": "a"}))
    )
    strict = FixMemory("row", store=store, trust=TrustPolicy(allow_origin_wide=False))

    found = strict.lookup(BASE, {"traveller": "b"}, operation=BOOK)

    assert found.entries == ()
    assert [e.detail for e in found.events if isinstance(e, Quarantined)] == [
        "the trust policy does not keep origin-wide fixes"
    ]
