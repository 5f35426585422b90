"""Mount anywhere (issue 21, item 6): the contract routes under any prefix are found from the
``Link`` every contract response carries; a retrofitted route included under a router prefix
is checked; a domain route no endpoint serves stops start-up; retrofitted routes answer a
malformed ``Contract-Since`` 422 and document the contract in OpenAPI."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st
from tests.service.conftest import TOKEN, Order, make_domain

from invalidation_contracts.client import FixMemory
from invalidation_contracts.httpx import ContractTransport
from invalidation_contracts.httpx.discovery import ContractLocations
from invalidation_contracts.protocol.links import (
    CONTRACT_RELATION,
    MAX_LINK_HEADER_BYTES,
    contract_target,
    link_header,
)
from invalidation_contracts.protocol.problems import PROBLEM_BASE
from invalidation_contracts.server.http import ContractService

ADMIN = {"Authorization": f"Bearer {TOKEN}"}
LINK = f'</api/contract>; rel="{CONTRACT_RELATION}"'


def retrofitted(prefix: str = "/api", route_prefix: str = "") -> FastAPI:
    """An existing app: its order route on ``service.router()`` (included under
    ``route_prefix``), the contract and admin routers under ``prefix``."""
    service = ContractService.open(make_domain(), admin_token=TOKEN)
    app = FastAPI(title="Existing shop", lifespan=service.lifespan)
    orders = service.router()

    @orders.post("/v1/orders"[len(route_prefix) :])
    async def place(order: Order) -> dict[str, Any]:
        return {"order": "accepted", "plan": order.plan}

    app.include_router(orders, prefix=route_prefix)
    app.include_router(service.contract_router(), prefix=prefix)
    app.include_router(service.admin_router(), prefix=prefix)
    return app


def solve(http: httpx.Client, plan: str) -> None:
    """Order ``plan``, applying the suggestions until accepted (bounded)."""
    body: dict[str, Any] = {"plan": plan}
    for _ in range(4):
        answer = http.post("/v1/orders", json=body)
        if answer.status_code == 200:
            return
        assert answer.status_code == 422, answer.text
        for suggestion in answer.json()["recovery_feedback"]["suggestions"]:
            body.update(suggestion["parameters"])
    raise AssertionError(f"{plan} was never accepted")


@pytest.mark.workers
def test_a_retrofitted_app_under_api_evicts_exactly_the_fix_of_the_changed_row(
    serve: Callable[..., Any],
) -> None:
    memory = FixMemory("row")
    with serve(retrofitted("/api")) as url:
        transport = ContractTransport(memory)
        with httpx.Client(transport=transport, base_url=url, timeout=30) as http:
            for plan in ("basic", "enterprise", "starter"):
                solve(http, plan)
            origin = url
            learned = len(memory.entries(origin))
            assert learned == 4  # basic, starter: funding; enterprise: funding and promo
            patch = httpx.post(
                url + "/api/admin/patch-table",
                json={"table": "plans", "upsert": {"basic": {"funding": "wire"}}},
                headers=ADMIN,
            )
            assert patch.status_code == 200, patch.text
            solve(http, "starter")  # learns its fix again (superseding), and reads the change
            evicted = [t for t in memory.tombstones(origin) if t.reason.value != "superseded"]
            assert [(t.entry.suggestion.scope, t.reason.value) for t in evicted] == [
                ({"plan": "basic"}, "row-changed")
            ], "1 fix evicted for 1 changed row"
            assert len(memory.entries(origin)) == learned - 1


@pytest.mark.workers
def test_a_new_process_fetches_under_the_contract_location_its_memory_kept(
    serve: Callable[..., Any], tmp_path: Any
) -> None:
    """Issue 41 item 4: the memory keeps each origin's contract location, so a new agent
    process confirms its stored fixes at once (it got a 404 at the root and withheld every fix
    until its first stamped answer named the location again)."""
    store = str(tmp_path / "memory.db")
    with serve(retrofitted("/api")) as url:
        first = FixMemory("row", store=store)
        with httpx.Client(transport=ContractTransport(first), base_url=url, timeout=30) as http:
            solve(http, "basic")
        assert first.state(url).contract_location == url + "/api/contract"
        first.close()
        memory = FixMemory("row", store=store)  # the next process, before any request
        transport = ContractTransport(memory)
        assert transport.confirm(url) == (), "confirmed at /api/contract, not deferred at /"
        served = memory.lookup(url, {"plan": "basic"}, operation="POST /v1/orders")
        assert served.entries and not served.needs
        memory.close()


def test_every_contract_response_links_to_the_contract_location() -> None:
    with TestClient(retrofitted("/api"), raise_server_exceptions=False) as http:
        answers = [
            http.post("/v1/orders", json={"plan": "basic"}),  # 422 policy violation
            http.post("/v1/orders", json={"plan": "basic", "funding_type": "card"}),  # 200
            http.get("/api/contract/versions"),
            http.get("/api/contract/changes?since=-1"),  # 422 from a contract route
        ]
        assert [a.status_code for a in answers] == [422, 200, 200, 422]
        assert all(a.headers["link"] == LINK for a in answers)


def test_a_route_included_under_a_router_prefix_is_checked() -> None:
    with TestClient(retrofitted("/api", route_prefix="/v1")) as http:
        answer = http.post("/v1/orders", json={"plan": "basic"})
        assert answer.status_code == 422
        assert answer.json()["type"] == PROBLEM_BASE + "policy-violation"


def test_a_domain_route_no_endpoint_serves_stops_start_up() -> None:
    service = ContractService.open(make_domain(), admin_token=TOKEN)
    app = FastAPI(lifespan=service.lifespan)
    orders = service.router()

    @orders.post("/order")  # the domain says /v1/orders
    async def place(order: Order) -> dict[str, str]:
        return {}

    app.include_router(orders, prefix="/v1")
    with pytest.raises(RuntimeError, match="POST /v1/orders"), TestClient(app):
        pass


@pytest.mark.parametrize(
    ("header", "value"),
    [("Contract-Since", "abc"), ("Contract-Since", "-1"), ("Contract-Epoch", "x" * 200)],
)
def test_a_malformed_contract_header_on_a_retrofitted_route_is_422(header: str, value: str) -> None:
    with TestClient(retrofitted()) as http:
        answer = http.post("/v1/orders", json={"plan": "basic"}, headers={header: value})
    assert answer.status_code == 422
    body = answer.json()
    assert body["type"] == PROBLEM_BASE + "invalid-request"
    assert body["errors"][0]["loc"] == ["header", header]


def test_the_retrofitted_routes_openapi_documents_the_contract() -> None:
    document = retrofitted().openapi()
    operation = document["paths"]["/v1/orders"]["post"]
    violation = operation["responses"]["422"]
    assert violation["content"]["application/problem+json"]["schema"] == {
        "$ref": "#/components/schemas/Problem"
    }
    assert "policy-violation" in violation["description"]
    assert "503" in operation["responses"]
    assert set(operation["responses"]["200"]["headers"]) == {"Contract-Since", "Link"}
    assert "contract_seq" in operation["responses"]["200"]["description"]
    assert "Problem" in document["components"]["schemas"]


# -- the client's side: reading the link ---------------------------------------------------------


def locations_after(link: str | None, url: str = "http://shop.test/v1/orders") -> httpx.URL:
    locations = ContractLocations()
    headers = httpx.Headers({"link": link} if link is not None else {})
    locations.learn("http://shop.test", httpx.URL(url), headers)
    return locations.url("http://shop.test", "/contract/changes")


def test_the_client_fetches_changes_under_the_advertised_location() -> None:
    assert str(locations_after(link_header("/api/contract"))) == (
        "http://shop.test/api/contract/changes"
    )


@pytest.mark.parametrize(
    "link",
    [
        None,
        '<https://elsewhere.test/contract>; rel="urn:invalidation-contracts:contract"',
        '</api/contract>; rel="next"',
        "</api/contract",
        f'</{"a" * MAX_LINK_HEADER_BYTES}>; rel="{CONTRACT_RELATION}"',
    ],
)
def test_a_missing_foreign_or_unreadable_link_leaves_the_root(link: str | None) -> None:
    assert str(locations_after(link)) == "http://shop.test/contract/changes"


def test_a_link_among_others_and_relative_to_the_request_is_found() -> None:
    link = f'<https://x.test/>; rel="next", <../contract>; rel="self {CONTRACT_RELATION}"'
    found = locations_after(link, "http://shop.test/api/v1/orders")
    assert str(found) == "http://shop.test/api/contract/changes"


@given(st.text(max_size=300))
def test_no_link_header_value_breaks_the_parser(value: str) -> None:
    target = contract_target(value)
    assert target is None or CONTRACT_RELATION in value


def test_a_404_at_the_root_waits_only_while_no_response_of_the_origin_was_read() -> None:
    locations = ContractLocations()
    url = httpx.URL("http://shop.test/contract/changes")
    missing = httpx.Response(404)
    assert locations.deferred("http://shop.test", url, missing), "fetched before any response"
    assert not locations.deferred("http://shop.test", url, missing), "that answer was read"


def test_the_link_names_the_root_path_each_request_is_served_under() -> None:
    app = retrofitted("/api")
    with (
        TestClient(app) as bare,
        TestClient(app, root_path="/shop") as rooted,
    ):
        passing = {"plan": "basic", "funding_type": "card"}
        links = [
            http.post("/v1/orders", json=passing).headers["link"]
            for http in (bare, rooted, bare, rooted)
        ]
    shop = f'</shop/api/contract>; rel="{CONTRACT_RELATION}"'
    assert links == [LINK, shop, LINK, shop]
