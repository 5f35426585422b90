"""Memory keyed by operation: a fix learned on one route (or tool) never serves another.

The operation is the request's method and route template, or an MCP tool name. The transport
takes it from the ``OPERATION_EXTENSION`` request extension, else from ``METHOD path``.
"""

from __future__ import annotations

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from invalidation_contracts.client import Evicted, EvictionReason, FixMemory, Stored
from invalidation_contracts.client.values import Observed
from invalidation_contracts.httpx import (
    OPERATION_EXTENSION,
    contract_client,
    operation_of,
)

ORDERS = "POST /v1/orders"
REFUNDS = "POST /v1/refunds"


def learn(memory, server, fix, operation, request=None):
    return memory.observe(
        server.url, Observed(request, 422, server.failure(fix)), operation=operation
    )


def promo(server, code="SUMMER"):
    return server.fix(
        "ADD_PROMO", {"promo_code": code}, scope={"plan": "plan_a"}, reads={"codes": ["plan_a"]}
    )


def test_a_fix_is_served_only_to_the_operation_it_was_learned_on(server):
    memory = FixMemory("row")
    learn(memory, server, promo(server), ORDERS)

    assert [
        e.id for e in memory.lookup(server.url, {"plan": "plan_a"}, operation=ORDERS).entries
    ] == ["e1"]
    assert list(memory.lookup(server.url, {"plan": "plan_a"}, operation=REFUNDS).entries) == []
    assert list(memory.lookup(server.url, {"plan": "plan_a"}).entries) == []


def test_an_origin_wide_fix_is_wide_within_its_operation_only(server):
    memory = FixMemory("row")
    learn(memory, server, server.fix("WIDE", {"region": "eu"}, reads={"codes": None}), ORDERS)

    assert [e.type for e in memory.lookup(server.url, {}, operation=ORDERS).entries] == ["WIDE"]
    assert list(memory.lookup(server.url, {}, operation=REFUNDS).entries) == []


def test_the_same_fix_on_two_operations_is_two_entries(server):
    memory = FixMemory("row")
    learn(memory, server, promo(server), ORDERS)

    stored = learn(memory, server, promo(server), REFUNDS).of(Stored)

    assert [(s.entry_id, s.replaced) for s in stored] == [("e2", None)]
    assert [e.key.operation for e in memory.entries(server.url)] == [ORDERS, REFUNDS]


def test_a_failure_of_one_operation_never_contradicts_a_fix_of_another(server):
    memory = FixMemory("row")
    learn(memory, server, promo(server), ORDERS)
    other = promo(server, code="OTHER")

    obs = memory.observe(
        server.url,
        Observed(
            {"plan": "plan_a", "promo_code": "SUMMER"}, 422, server.failure(other), injected=["e1"]
        ),
        operation=REFUNDS,
    )

    assert EvictionReason.CONTRADICTED not in {e.reason for e in obs.of(Evicted)}
    assert "e1" in {e.id for e in memory.entries(server.url)}


def test_events_and_keys_name_the_operation(server):
    memory = FixMemory("row")

    (stored,) = learn(memory, server, promo(server), ORDERS).of(Stored)

    assert stored.to_dict()["operation"] == ORDERS
    assert memory.entries(server.url)[0].key.to_dict()["operation"] == ORDERS


def _orders_app(server) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/orders/{order}")
    async def orders(order: str, request: Request):
        body = await request.json()
        code = server.tables["codes"][body["plan"]]["code"]
        if body.get("promo_code") == code:
            return JSONResponse(server.success())
        fix = server.fix(
            "ADD_PROMO",
            {"promo_code": code},
            scope={"plan": body["plan"]},
            reads={"codes": [body["plan"]]},
        )
        return JSONResponse(server.failure(fix), 422, media_type="application/problem+json")

    return app


def test_the_transport_files_a_fix_under_the_operation_extension(server):
    memory = FixMemory("row")
    template = "POST /v1/orders/{order}"
    transport = httpx.ASGITransport(_orders_app(server))
    with contract_client(memory, transport=_Sync(transport), base_url=server.url) as client:
        client.post(
            "/v1/orders/7", json={"plan": "plan_a"}, extensions={OPERATION_EXTENSION: template}
        )

    assert [e.key.operation for e in memory.entries(server.url)] == [template]
    assert memory.lookup(server.url, {"plan": "plan_a"}, operation=template).entries


def test_without_the_extension_the_operation_is_the_method_and_path(server):
    memory = FixMemory("row")
    transport = httpx.ASGITransport(_orders_app(server))
    with contract_client(memory, transport=_Sync(transport), base_url=server.url) as client:
        client.post("/v1/orders/7?expand=1", json={"plan": "plan_a"})

    assert [e.key.operation for e in memory.entries(server.url)] == ["POST /v1/orders/7"]


def test_operation_of_prefers_the_extension_to_the_url():
    named = httpx.Request("GET", "https://x.test/a/1", extensions={OPERATION_EXTENSION: "tool"})
    plain = httpx.Request("DELETE", "https://x.test/a/1?q=2")

    assert (operation_of(named), operation_of(plain)) == ("tool", "DELETE /a/1")


class _Sync(httpx.BaseTransport):
    """A sync transport over an ASGI app (for the sync client in these tests)."""

    def __init__(self, inner: httpx.ASGITransport) -> None:
        self.inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        import asyncio

        async def go() -> httpx.Response:
            response = await self.inner.handle_async_request(request)
            content = await response.aread()
            return httpx.Response(response.status_code, headers=response.headers, content=content)

        return asyncio.run(go())
