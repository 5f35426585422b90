"""The httpx integration against a small real contract server, in-process and over loopback."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from invalidation_contracts.client import (
    AsyncFixMemory,
    Evicted,
    EvictionReason,
    FetchFailed,
    FixMemory,
    InMemoryStore,
    Stored,
)
from invalidation_contracts.httpx import (
    EPISODE_EXTENSION,
    INJECTED_EXTENSION,
    AsyncContractTransport,
    ContractTransport,
    contract_client,
    default_origin,
)
from invalidation_contracts.protocol import ProblemType
from invalidation_contracts.protocol.headers import CONTRACT_SINCE


def contract_app(server, *, serve_changes: bool = True) -> FastAPI:
    """``POST /v1/orders`` needs the promo code ``codes[plan]``; contract routes read ``server``."""
    app = FastAPI()
    app.state.seen_since = []
    app.state.changes_asked = []

    def since_of(request: Request) -> int | None:
        raw = request.headers.get(CONTRACT_SINCE)
        app.state.seen_since.append(raw)
        return int(raw) if raw is not None and raw.isdigit() else None

    @app.post("/v1/orders")
    async def orders(request: Request):
        body = await request.json()
        since = since_of(request)
        headers = {CONTRACT_SINCE: str(since)} if since is not None else {}
        plan = body.get("plan")
        code = server.tables["codes"].get(plan, {}).get("code")
        if code is not None and body.get("promo_code") != code:
            fix = server.fix(
                "ADD_PROMO", {"promo_code": code}, scope={"plan": plan}, reads={"codes": [plan]}
            )
            return JSONResponse(
                server.failure(fix, since=since),
                422,
                headers,
                media_type="application/problem+json",
            )
        return JSONResponse(server.success(since), 200, headers)

    @app.get("/v1/legacy")
    async def legacy():
        return PlainTextResponse("plain text error", 400)

    @app.get("/contract/changes")
    async def changes(since: int, epoch: str | None = None):
        app.state.changes_asked.append((since, epoch))
        if not serve_changes:
            return JSONResponse({"title": "no"}, 404)
        if server.floor <= since <= server.seq and epoch in (None, server.epoch):
            return JSONResponse(server.changes(since))
        kind = ProblemType.RESYNC_REQUIRED
        return JSONResponse(
            {"type": kind.uri, "title": kind.title, "status": 410},
            410,
            media_type="application/problem+json",
        )

    @app.get("/contract/rules")
    async def rules():
        return JSONResponse(server.rules_listing())

    return app


@pytest.fixture
def loopback(server):
    """The contract app served by uvicorn on 127.0.0.1, on a free port."""
    app = contract_app(server)
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    web = uvicorn.Server(config)
    thread = threading.Thread(target=web.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not web.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    port = web.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}", app
    web.should_exit = True
    thread.join(timeout=10)


def test_a_wrapped_sync_client_learns_and_evicts_over_loopback(loopback, server):
    url, _ = loopback
    memory = FixMemory("row")
    events = []
    with contract_client(memory, base_url=url, listener=events.append) as client:
        client.post("/v1/orders", json={"plan": "plan_a"})
        (fix,) = memory.lookup(url, {"plan": "plan_a"}, operation="POST /v1/orders").entries
        ok = client.post(
            "/v1/orders",
            json={"plan": "plan_a", **fix.suggestion.parameters},
            extensions={INJECTED_EXTENSION: [fix.id]},
        )
        server.update("codes", "plan_a", {"code": "WINTER"})
        client.post("/v1/orders", json={"plan": "plan_b", "promo_code": "SPRING"})

    assert ok.status_code == 200
    assert [type(e) for e in events if isinstance(e, (Stored, Evicted))] == [Stored, Evicted]
    assert [(e.entry_id, e.reason) for e in events if isinstance(e, Evicted)] == [
        ("e1", EvictionReason.ROW_CHANGED)
    ]
    assert memory.entries(url) == []


def test_the_transport_asks_for_changes_since_its_position_in_its_epoch(loopback, server):
    url, app = loopback
    memory = FixMemory("row")
    with contract_client(memory, base_url=url) as client:
        client.post("/v1/orders", json={"plan": "plan_a"})
        server.touch("codes")
        client.post("/v1/orders", json={"plan": "plan_b", "promo_code": "SPRING"})

    assert app.state.changes_asked == [(0, "epoch-1")]


def test_the_sync_transport_sends_contract_since_once_it_knows_a_position(loopback):
    url, app = loopback
    memory = FixMemory("row")
    with contract_client(memory, base_url=url) as client:
        client.post("/v1/orders", json={"plan": "plan_a"})
        client.post("/v1/orders", json={"plan": "plan_a"})

    assert app.state.seen_since == [None, "0"]


def test_conditional_contract_can_be_switched_off(loopback):
    url, app = loopback
    memory = FixMemory("row")
    with contract_client(memory, base_url=url, conditional=False) as client:
        client.post("/v1/orders", json={"plan": "plan_a"})
        client.post("/v1/orders", json={"plan": "plan_a"})

    assert app.state.seen_since == [None, None]


def test_the_async_transport_feeds_the_memory_and_fulfils_its_needs(server):
    memory = FixMemory("row")
    events = []
    transport = AsyncContractTransport(
        memory, httpx.ASGITransport(contract_app(server)), listener=events.append
    )

    async def run():
        async with httpx.AsyncClient(transport=transport, base_url="http://shop.test") as client:
            await client.post(
                "/v1/orders", json={"plan": "plan_a"}, extensions={EPISODE_EXTENSION: 1}
            )
            await client.post(
                "/v1/orders", json={"plan": "plan_b"}, extensions={EPISODE_EXTENSION: 1}
            )
            server.touch("codes")
            await client.post(
                "/v1/orders",
                json={"plan": "plan_b", "promo_code": "SPRING"},
                extensions={EPISODE_EXTENSION: 2},
            )

    asyncio.run(run())

    restamped = [e for e in events if e.kind == "restamped"]
    assert [(e.entry_id, e.episode) for e in restamped] == [("e1", 2), ("e2", 2)]
    assert [e.episode for e in events if isinstance(e, Stored)] == [1, 1]


def test_a_gone_changes_feed_makes_the_transport_resync(server):
    memory = FixMemory("row")
    transport = AsyncContractTransport(memory, httpx.ASGITransport(contract_app(server)))

    async def run():
        async with httpx.AsyncClient(transport=transport, base_url="http://shop.test") as client:
            await client.post("/v1/orders", json={"plan": "plan_a"})
            server.touch("codes")
            server.forget_log()
            return await client.post("/v1/orders", json={"plan": "plan_b", "promo_code": "SPRING"})

    response = asyncio.run(run())

    assert response.status_code == 200
    assert [t.reason for t in memory.tombstones("http://shop.test")] == [EvictionReason.RESYNC]


def test_a_server_without_a_changes_feed_gets_table_level_eviction(server):
    memory = FixMemory("row")
    transport = AsyncContractTransport(
        memory, httpx.ASGITransport(contract_app(server, serve_changes=False))
    )

    async def run():
        async with httpx.AsyncClient(transport=transport, base_url="http://shop.test") as client:
            await client.post("/v1/orders", json={"plan": "plan_a"})
            server.touch("codes")
            await client.post("/v1/orders", json={"plan": "plan_b", "promo_code": "SPRING"})

    asyncio.run(run())

    assert [t.reason for t in memory.tombstones("http://shop.test")] == [
        EvictionReason.TABLE_CHANGED
    ]


class _FlakyContract(httpx.BaseTransport):
    """Forwards the API to ``inner`` and fails every contract fetch at the network level."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.startswith("/contract/"):
            raise httpx.ConnectError("connection refused", request=request)
        return self.inner.handle_request(request)


def test_a_failed_change_fetch_is_an_event_and_a_log_record_naming_the_withheld_entries(
    loopback, server, caplog
):
    url, _ = loopback
    memory = FixMemory("row")
    events = []
    client = httpx.Client(
        transport=ContractTransport(
            memory, _FlakyContract(httpx.HTTPTransport()), listener=events.append
        ),
        base_url=url,
    )
    with client, caplog.at_level("WARNING", logger="invalidation_contracts.client"):
        client.post("/v1/orders", json={"plan": "plan_a"})
        server.touch("codes")
        client.post("/v1/orders", json={"plan": "plan_b", "promo_code": "SPRING"})

    (failed,) = [e for e in events if isinstance(e, FetchFailed)]
    assert failed.path == "/contract/changes" and failed.withheld == ("e1",)
    assert failed.detail.startswith("ConnectError")
    (record,) = caplog.records
    assert (
        "/contract/changes" in record.getMessage() and "1 entries withheld" in record.getMessage()
    )
    assert memory.stats(url).fetch_failures == 1


def test_the_async_transport_reports_a_failed_change_fetch(server):
    memory = FixMemory("row")
    events = []

    class Flaky(httpx.AsyncBaseTransport):
        def __init__(self) -> None:
            self.inner = httpx.ASGITransport(contract_app(server))

        async def handle_async_request(self, request):
            if request.url.path.startswith("/contract/"):
                raise httpx.ReadTimeout("timed out", request=request)
            return await self.inner.handle_async_request(request)

    transport = AsyncContractTransport(memory, Flaky(), listener=events.append)

    async def run():
        async with httpx.AsyncClient(transport=transport, base_url="http://shop.test") as client:
            await client.post("/v1/orders", json={"plan": "plan_a"})
            server.touch("codes")
            await client.post("/v1/orders", json={"plan": "plan_b", "promo_code": "SPRING"})

    asyncio.run(run())

    (failed,) = [e for e in events if isinstance(e, FetchFailed)]
    assert failed.detail == "ReadTimeout: timed out" and failed.withheld == ("e1",)


def test_a_network_error_on_a_contract_fetch_never_fails_the_agents_request(loopback, server):
    url, _ = loopback
    memory = FixMemory("row")
    with httpx.Client(
        transport=ContractTransport(memory, _FlakyContract(httpx.HTTPTransport())), base_url=url
    ) as client:
        client.post("/v1/orders", json={"plan": "plan_a"})
        server.touch("codes")
        response = client.post("/v1/orders", json={"plan": "plan_b", "promo_code": "SPRING"})

    assert response.status_code == 200
    assert len(memory.entries(url)) == 1
    assert list(memory.lookup(url, {"plan": "plan_a"}, operation="POST /v1/orders").entries) == []
    assert memory.begin_episode(url, 2)[0].origin == url


def test_a_non_json_response_is_observed_without_contract(loopback):
    url, _ = loopback
    memory = FixMemory("row")
    with contract_client(memory, base_url=url) as client:
        response = client.get("/v1/legacy")

    stats = memory.stats(url)
    assert response.text == "plain text error"
    assert (stats.responses, stats.contract_bytes, stats.response_bytes) == (
        1,
        0,
        len("plain text error"),
    )


def test_the_response_body_is_still_readable_by_the_agent(loopback):
    url, _ = loopback
    with contract_client(FixMemory("row"), base_url=url) as client:
        response = client.post("/v1/orders", json={"plan": "plan_a"})

    assert response.json()["recovery_feedback"]["suggestions"][0]["type"] == "ADD_PROMO"


@pytest.mark.parametrize(
    "url, origin",
    [
        ("https://api.example/v1/x?y=1", "https://api.example"),
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080"),
        ("http://[::1]:9000/", "http://[::1]:9000"),
    ],
)
def test_the_default_origin_is_scheme_host_and_port(url, origin):
    assert default_origin(httpx.URL(url)) == origin


class _OffTheLoop(InMemoryStore):
    """A store that refuses to run a batch on a thread that runs an event loop."""

    def batch(self, ops):
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return super().batch(ops)
        raise AssertionError("a blocking store batch ran on the event loop")


def test_the_async_transport_never_runs_store_io_on_the_event_loop(server):
    memory = FixMemory("row", store=_OffTheLoop())
    transport = AsyncContractTransport(memory, httpx.ASGITransport(contract_app(server)))

    async def run():
        async with httpx.AsyncClient(transport=transport, base_url="http://shop.test") as client:
            await client.post("/v1/orders", json={"plan": "plan_a"})
            server.touch("codes")
            await client.post("/v1/orders", json={"plan": "plan_b", "promo_code": "SPRING"})
            aio = AsyncFixMemory.over(memory)
            found = await aio.lookup(
                "http://shop.test", {"plan": "plan_a"}, operation="POST /v1/orders"
            )
            await aio.close()
            return found.entries

    found = asyncio.run(run())

    assert [e.restamps for e in found] == [1]
