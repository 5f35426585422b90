"""A contract app mounted inside a larger app (issue 41, fault and change suite: mounted sub-app).

A provider's shop is its own FastAPI app (retrofitted routes, the contract and admin routers under
``/api``) mounted at ``/shop`` in a larger app: ``outer.mount("/shop", shop)``. Starlette runs no
lifespan of a mounted app, so the outer app enters the service's (``lifespan=service.lifespan``).
Served by real uvicorn, everything works under the prefix: the policy runs and stamps, the
``Link`` names ``/shop/api/contract``, the probes answer there, an agent's memory evicts exactly
the fix of the changed row, and the watch stream reaches an idle agent. Its history is a shared
SQLite registry, so the worker follows it (the probe says ``following``). A domain route that only
the mount's path would make match (requests are matched on their path within the mount) stops
start-up instead of answering unchecked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from tests.service.conftest import TOKEN, Order, make_domain, running

from invalidation_contracts.client import Evicted, FixMemory
from invalidation_contracts.httpx import ContractTransport, WatchOptions, contract_client, watches
from invalidation_contracts.protocol.links import CONTRACT_RELATION
from invalidation_contracts.protocol.problems import PROBLEM_BASE
from invalidation_contracts.server.http import ContractService

pytestmark = pytest.mark.workers

ADMIN = {"Authorization": f"Bearer {TOKEN}"}
LINK = f'</shop/api/contract>; rel="{CONTRACT_RELATION}"'
ORDER = "POST /shop/v1/orders"  # the operation as the agent sees it: the URL's path
FAST = WatchOptions(stall_timeout_s=5.0, backoff_initial_s=0.05, backoff_max_s=0.5)


def shop(service: ContractService, route_path: str = "/v1/orders") -> FastAPI:
    """The shop app: its order route retrofitted at ``route_path``, contract and admin under
    ``/api``. No lifespan of its own: mounted, it would never run."""
    app = FastAPI(title="Shop")
    orders = service.router()

    @orders.post(route_path, status_code=201)
    async def place(order: Order) -> dict[str, Any]:
        return {"order": "accepted", "plan": order.plan}

    app.include_router(orders)
    app.include_router(service.contract_router(), prefix="/api")
    app.include_router(service.admin_router(), prefix="/api")
    return app


def mounted(at: str = "/shop", route_path: str = "/v1/orders", **options: Any) -> FastAPI:
    """The larger app: its own route, the shop mounted at ``at``, the service's lifespan
    (``options``: the service's, e.g. a shared ``store=`` whose history it follows)."""
    service = ContractService.open(make_domain(), admin_token=TOKEN, **options)
    service.watch_heartbeat_s = 0.2
    outer = FastAPI(title="Storefront", lifespan=service.lifespan)

    @outer.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    outer.mount(at, shop(service, route_path))
    return outer


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    store = tmp_path_factory.mktemp("mounted") / "registry.sqlite"
    with running(mounted(store=store)) as base:
        yield base


def solve(http: httpx.Client, plan: str) -> None:
    """Order ``plan``, applying the suggestions until accepted (bounded)."""
    body: dict[str, Any] = {"plan": plan}
    for _ in range(4):
        answer = http.post("/shop/v1/orders", json=body)
        if answer.status_code == 201:
            return
        assert answer.status_code == 422, answer.text
        for suggestion in answer.json()["recovery_feedback"]["suggestions"]:
            body.update(suggestion["parameters"])
    raise AssertionError(f"{plan} was never accepted")


def patch_plan(url: str, plan: str, row: dict[str, str]) -> int:
    answer = httpx.post(
        url + "/shop/api/admin/patch-table",
        json={"table": "plans", "upsert": {plan: row}},
        headers=ADMIN,
    )
    assert answer.status_code == 200, answer.text
    return int(answer.json()["contract_seq"])


def test_a_mounted_shop_checks_the_policy_and_stamps_under_the_prefix(url: str) -> None:
    refused = httpx.post(url + "/shop/v1/orders", json={"plan": "basic"})
    assert refused.status_code == 422
    assert refused.json()["type"] == PROBLEM_BASE + "policy-violation"
    accepted = httpx.post(url + "/shop/v1/orders", json={"plan": "basic", "funding_type": "card"})
    assert accepted.status_code == 201, accepted.text
    assert {"contract_seq", "contract_epoch", "table_versions"} <= set(accepted.json())
    assert refused.headers["link"] == accepted.headers["link"] == LINK
    assert httpx.get(url + "/health").json() == {"status": "ok"}, "the outer app's own route"


def test_the_mounted_contract_routes_and_probes_answer_under_the_prefix(url: str) -> None:
    versions = httpx.get(url + "/shop/api/contract/versions")
    assert versions.status_code == 200 and versions.headers["link"] == LINK
    ready = httpx.get(url + "/shop/api/contract/ready")
    assert ready.status_code == 200, ready.text
    assert ready.json()["ready"] and ready.json()["state"] == "following"
    assert httpx.get(url + "/contract/versions").status_code == 404, "nothing outside the mount"


def test_an_agent_of_the_mounted_shop_evicts_exactly_the_fix_of_the_changed_row(url: str) -> None:
    memory = FixMemory("row")
    with httpx.Client(transport=ContractTransport(memory), base_url=url, timeout=30) as http:
        for plan in ("basic", "enterprise", "starter"):
            solve(http, plan)
        learned = len(memory.entries(url))
        assert learned == 4  # basic, starter: funding; enterprise: funding and promo
        patch_plan(url, "basic", {"funding": "wire"})
        solve(http, "starter")  # reads the change through the Link's /shop/api/contract
    evicted = [t for t in memory.tombstones(url) if t.reason.value != "superseded"]
    assert [(t.entry.suggestion.scope, t.reason.value) for t in evicted] == [
        ({"plan": "basic"}, "row-changed")
    ]
    assert len(memory.entries(url)) == learned - 1


def test_the_watch_under_the_prefix_evicts_a_fix_before_the_next_request(url: str) -> None:
    memory = FixMemory("row")
    events: list[Any] = []
    draft = {"plan": "enterprise", "funding_type": "invoice"}
    with contract_client(memory, base_url=url, watch=FAST, listener=events.append) as client:
        assert client.post("/shop/v1/orders", json=draft).status_code == 422
        (fix,) = memory.lookup(url, draft, operation=ORDER).entries
        wait(lambda: watches(client).is_open(url))
        seq = patch_plan(url, "enterprise", {"funding": "invoice", "promo": "ENT30"})
        assert watches(client).caught_up(url, seq, timeout_s=10)
        assert list(memory.lookup(url, draft, operation=ORDER).entries) == []
    assert any(isinstance(e, Evicted) and e.entry_id == fix.id for e in events)


def test_a_route_the_domain_matches_only_through_the_mount_path_stops_start_up() -> None:
    """``/v1`` + ``/orders`` is the domain's ``/v1/orders`` only as a URL: requests are matched
    on their path within the mount (``/orders``), so its policies would never run."""
    with (
        pytest.raises(RuntimeError, match="POST /v1/orders"),
        TestClient(mounted(at="/v1", route_path="/orders")),
    ):
        pass


def wait(predicate: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
