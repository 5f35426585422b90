"""The transport's public need-fulfilment and event API, against the real Acme provider in-process.

A caller that must see every event one request caused (the harness's oracle does) gives the
request a listener; needs the memory returns outside a response (``begin_episode``) go through
``fulfil``, the loop every response uses; each JSON response carries its measured wire cost.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from invalidation_contracts.client import Evicted, FixMemory, Stored
from invalidation_contracts.client.events import FetchChanges
from invalidation_contracts.client.values import Observed
from invalidation_contracts.domains import get_catalog
from invalidation_contracts.httpx import (
    EPISODE_EXTENSION,
    LISTENER_EXTENSION,
    WIRE_COST_EXTENSION,
    AsyncContractTransport,
    ContractTransport,
)
from invalidation_contracts.protocol.wirecost import wire_cost
from invalidation_contracts.server import read_snapshot
from invalidation_contracts.server.http.app import create_app

ORIGIN = "http://acme.test"
CATALOG = get_catalog("acme_billing")
GROWTH = dict(CATALOG.task_families["governed-partner-growth"].fields)
ROUTE = CATALOG.route.path


def acme_app():
    return create_app(CATALOG.domain, registry=CATALOG.domain.registry(), admin_token="t")


def rotate(app):
    snap = read_snapshot(CATALOG.snapshots["active_csm_codes.rotation-1"])
    app.state.registry.reload(snap.table, snap.rows, snap.version)


class Recording(httpx.AsyncBaseTransport):
    """Forwards to ``inner``; records each path, and refuses contract fetches while ``down``."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.paths: list[str] = []
        self.down = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        if self.down and request.url.path.startswith("/contract/"):
            raise httpx.ConnectError("connection refused", request=request)
        return await self.inner.handle_async_request(request)


@pytest.fixture
def app():
    return acme_app()


def agent(app, strategy="row", detection="eager", listener=None):
    memory = FixMemory(strategy, detection)
    wire = Recording(httpx.ASGITransport(app=app))
    transport = AsyncContractTransport(memory, wire, listener=listener)
    return memory, wire, transport


def test_a_request_listener_gets_the_events_of_its_response_and_of_the_needs_fetched_for_it(app):
    first, second, everything = [], [], []
    _, _, transport = agent(app, listener=everything.append)

    async def run():
        async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as client:
            await client.post(ROUTE, json=GROWTH, extensions={LISTENER_EXTENSION: first.append})
            rotate(app)
            await client.post(ROUTE, json=GROWTH, extensions={LISTENER_EXTENSION: second.append})

    asyncio.run(run())

    assert [type(e) for e in first] == [Stored]
    evicted = [e for e in second if isinstance(e, Evicted)]
    assert [e.entry_id for e in evicted] == ["e1"]  # decided by the changes feed fetched for it
    assert [type(e) for e in second if isinstance(e, Stored)] == [Stored]  # learned after it
    assert everything == first + second


def test_fulfil_fetches_the_needs_begin_episode_returns(app):
    memory, wire, transport = agent(app, detection="resync")
    events = []

    async def run():
        async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as client:
            await client.post(ROUTE, json=GROWTH, extensions={EPISODE_EXTENSION: 1})
            rotate(app)
            needs = memory.begin_episode(ORIGIN, 2)
            return needs, await transport.fulfil(needs, episode=2, listener=events.append)

    needs, outstanding = asyncio.run(run())

    assert [type(n) for n in needs] == [FetchChanges] and outstanding == ()
    assert wire.paths[-1] == "/contract/changes"
    assert [(e.entry_id, e.episode) for e in events if isinstance(e, Evicted)] == [("e1", 2)]
    assert memory.entries(ORIGIN) == []


def test_fulfil_returns_the_needs_a_network_error_left_outstanding(app):
    memory, wire, transport = agent(app, detection="resync")

    async def run():
        async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as client:
            await client.post(ROUTE, json=GROWTH)
            wire.down = True
            return await transport.fulfil(memory.begin_episode(ORIGIN, 2), episode=2)

    outstanding = asyncio.run(run())

    assert [type(n) for n in outstanding] == [FetchChanges]
    assert len(memory.entries(ORIGIN)) == 1  # nothing decided without an answer


def test_fulfil_fetches_a_need_given_twice_once(app):
    _, wire, transport = agent(app)
    need = FetchChanges(ORIGIN, 0)
    wire.down = True

    outstanding = asyncio.run(transport.fulfil([need, need]))

    assert outstanding == (need,) and wire.paths == ["/contract/changes"]


def test_each_json_response_carries_the_wire_cost_the_memory_counted(app):
    memory, _, transport = agent(app)

    async def run():
        async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as client:
            return await client.post(ROUTE, json=GROWTH)

    response = asyncio.run(run())

    cost = response.extensions[WIRE_COST_EXTENSION]
    assert cost == wire_cost(response.json()) and cost.suggestions > 0
    assert memory.stats(ORIGIN).contract_bytes == cost.contract


def test_the_sync_transport_fulfils_needs_through_the_same_loop():
    memory = FixMemory("row", "resync")
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, request.headers.get("authorization")))
        return httpx.Response(410, json={"status": 410}, request=request)

    memory.observe(ORIGIN, Observed(GROWTH, 200, {"contract_seq": 3, "contract_epoch": "x"}))
    transport = ContractTransport(memory, httpx.MockTransport(handler))
    need = FetchChanges(ORIGIN, 3, "x")

    assert transport.fulfil([need], headers={"authorization": "Bearer k"}) == ()
    assert seen == [("/contract/changes", "Bearer k")]
