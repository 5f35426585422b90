"""The watch stream (SPEC §8.4) with real uvicorn: the route's answers, and an idle agent whose
memory evicts a fix made stale by a change committed while it idled, before its next request."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from invalidation_contracts.client import AsyncFixMemory, Evicted, FixMemory
from invalidation_contracts.client.events import WatchLost, WatchOpened
from invalidation_contracts.client.sse import SSEParser
from invalidation_contracts.httpx import (
    WatchOptions,
    async_contract_client,
    contract_client,
    watches,
)
from invalidation_contracts.server.http.app import create_app

from .conftest import PLANS, TOKEN

pytestmark = pytest.mark.watch

ORDER = "POST /v1/orders"
DRAFT = {"plan": "enterprise", "funding_type": "invoice"}
FAST = WatchOptions(stall_timeout_s=5.0, backoff_initial_s=0.05, backoff_max_s=0.5)


def _app(domain, **options):
    app = create_app(domain, admin_token=TOKEN, **options)
    app.state.service.watch_heartbeat_s = 0.2
    return app


def _drift(url: str) -> int:
    """The operator changes the enterprise promo code; returns the change's contract_seq."""
    rows = {**PLANS, "enterprise": {"funding": "invoice", "promo": "ENT20"}}
    answer = httpx.post(
        f"{url}/admin/reload-table",
        json={"table": "plans", "rows": rows},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert answer.status_code == 200, answer.text
    return int(answer.json()["contract_seq"])


def _wait(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _events(url: str, query: str, count: int, timeout_s: float = 10.0) -> list:
    parser, got = SSEParser(), []
    with httpx.stream("GET", f"{url}/contract/watch?{query}", timeout=timeout_s) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for chunk in response.iter_raw():
            got.extend(parser.feed(chunk))
            if len(got) >= count:
                break
    return got


def test_a_watch_announces_the_current_position_and_every_later_one(domain, serve):
    with serve(_app(domain)) as url:
        (first,) = _events(url, "since=0", 0) or [None]  # nothing moved yet: no event
        seq = _drift(url)
        epoch = httpx.get(f"{url}/contract/versions").json()["contract_epoch"]
        (event,) = _events(url, f"since=0&epoch={epoch}", 1)
    assert first is None
    assert event.event == "versions" and event.id == str(seq)
    assert '"contract_seq":1' in event.data


def test_a_watch_on_another_epoch_is_410_before_any_event(domain, serve):
    with serve(_app(domain)) as url:
        answer = httpx.get(f"{url}/contract/watch?since=0&epoch=not-this-one")
        ahead = httpx.get(f"{url}/contract/watch?since=99")
        bad = httpx.get(f"{url}/contract/watch?since=-1")
    assert answer.status_code == 410
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["type"].endswith("resync-required")
    assert ahead.status_code == 410
    assert bad.status_code == 422


@pytest.mark.parametrize(
    "query",
    ["since=abc", "since=9007199254740992", "timeout=0", "timeout=99999", "epoch=" + "e" * 129],
)
def test_a_malformed_watch_is_a_422_problem(domain, serve, query):
    with serve(_app(domain)) as url:
        answer = httpx.get(f"{url}/contract/watch?{query}", timeout=5)
    assert answer.status_code == 422
    assert answer.headers["content-type"] == "application/problem+json"


def test_an_idle_stream_sends_heartbeats_and_ends_after_its_timeout(domain, serve):
    with serve(_app(domain)) as url:
        start = time.monotonic()
        parser = SSEParser()
        response = httpx.get(f"{url}/contract/watch?since=0&timeout=1", timeout=10)
        parser.feed(response.content)
        elapsed = time.monotonic() - start
    assert response.status_code == 200
    assert parser.progress >= 2  # heartbeats every 0.2 s for 1 s
    assert elapsed < 5


def test_an_idle_agent_evicts_a_fix_made_stale_before_its_next_request(domain, serve):
    memory = FixMemory("row")
    events: list = []
    with serve(_app(domain)) as url:
        with contract_client(memory, base_url=url, watch=FAST, listener=events.append) as client:
            assert client.post("/v1/orders", json=DRAFT).status_code == 422
            (fix,) = memory.lookup(url, DRAFT, operation=ORDER).entries
            assert fix.suggestion.parameters == {"promo_code": "ENT10"}
            _wait(lambda: watches(client).is_open(url))
            seq = _drift(url)  # committed while the agent idles
            assert watches(client).caught_up(url, seq, timeout_s=10)
            stale = list(
                memory.lookup(url, DRAFT, operation=ORDER).entries
            )  # before any next request
    assert stale == []
    assert any(isinstance(e, Evicted) and e.entry_id == fix.id for e in events)
    assert any(isinstance(e, WatchOpened) for e in events)


def test_without_the_watch_the_first_request_after_a_drift_carries_the_stale_fix(domain, serve):
    memory = FixMemory("row")
    with serve(_app(domain)) as url:
        with contract_client(memory, base_url=url) as client:
            client.post("/v1/orders", json=DRAFT)
            _drift(url)
            time.sleep(0.3)
            stale = list(memory.lookup(url, DRAFT, operation=ORDER).entries)
    assert [f.suggestion.parameters for f in stale] == [{"promo_code": "ENT10"}]


def test_an_idle_async_agent_evicts_a_fix_made_stale_before_its_next_request(domain, serve):
    memory = FixMemory("row")
    events: list = []

    async def agent(url: str) -> list:
        async with async_contract_client(
            memory, base_url=url, watch=FAST, listener=events.append
        ) as client:
            await client.post("/v1/orders", json=DRAFT)
            aio = AsyncFixMemory.over(memory)
            assert (await aio.lookup(url, DRAFT, operation=ORDER)).entries
            for _ in range(500):
                if watches(client).is_open(url):
                    break
                await asyncio.sleep(0.01)
            seq = await asyncio.to_thread(_drift, url)
            assert await watches(client).acaught_up(url, seq, timeout_s=10)
            return list((await aio.lookup(url, DRAFT, operation=ORDER)).entries)

    with serve(_app(domain)) as url:
        stale = asyncio.run(agent(url))
    assert stale == []
    assert any(isinstance(e, Evicted) for e in events), events


def test_a_watch_lost_with_its_server_says_so_and_resumes_from_its_seq(domain, serve, tmp_path):
    """The server stops (history kept in SQLite) and a change is committed while it is down;
    the watch says it is lost, the memory keeps working, and when the server is back the watch
    resumes from its seq and the stale fix is evicted with no request from the agent."""
    store = tmp_path / "registry.db"
    memory = FixMemory("row")
    events: list = []
    with serve(_app(domain, store=store), graceful_s=0.5) as url:
        port = httpx.URL(url).port
        client = contract_client(memory, base_url=url, watch=FAST, listener=events.append)
        client.post("/v1/orders", json=DRAFT)
        _wait(lambda: watches(client).is_open(url))
    try:
        _wait(lambda: any(isinstance(e, WatchLost) for e in events))
        assert memory.lookup(url, DRAFT, operation=ORDER).entries  # response-time detection: kept
        with serve(_app(domain, store=store), graceful_s=0.5, port=port) as again:
            assert again == url
            seq = _drift(url)
            assert watches(client).caught_up(url, seq, timeout_s=15)
            assert list(memory.lookup(url, DRAFT, operation=ORDER).entries) == []
    finally:
        client.close()


@pytest.mark.workers
def test_every_worker_of_serve_workers_pushes_a_change_another_committed(tmp_path):
    """``serve --workers 2`` on one SQLite history: streams on whichever worker accepted them
    all hear of a reload committed through any worker, and an idle agent evicts its fix."""
    from tests.support.processes import serving

    from invalidation_contracts.domains import get_catalog

    token = "watch-admin-token"
    args = ["--domain", "acme_billing", "--db", str(tmp_path / "registry.db"), "--workers", "2"]
    catalog = get_catalog("acme_billing")
    draft = catalog.family("governed-partner-growth").draft()
    memory = FixMemory("row")
    env = {"INVALIDATION_CONTRACTS_ADMIN_TOKEN": token}
    with serving(args, tmp_path / "logs", env=env) as url:
        epoch = httpx.get(f"{url}/contract/versions").json()["contract_epoch"]
        streams = [
            httpx.stream("GET", f"{url}/contract/watch?since=0&epoch={epoch}", timeout=20)
            for _ in range(4)
        ]
        opened = [s.__enter__() for s in streams]
        with contract_client(memory, base_url=url, watch=FAST) as client:
            assert client.post("/v1/subscriptions", json=draft).status_code == 422
            assert memory.lookup(url, draft, operation="POST /v1/subscriptions").entries
            _wait(lambda: watches(client).is_open(url))
            data = catalog.read_snapshot("active_csm_codes.rotation-1")
            reload = httpx.post(
                f"{url}/admin/reload-table",
                json={"table": data.table, "rows": data.rows},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert reload.status_code == 200, reload.text
            seq = reload.json()["contract_seq"]
            assert watches(client).caught_up(url, seq, timeout_s=15)
            assert list(memory.lookup(url, draft, operation="POST /v1/subscriptions").entries) == []
        heard = []
        for response in opened:
            parser, events = SSEParser(), []
            for chunk in response.iter_raw():
                events.extend(parser.feed(chunk))
                if events:
                    break
            heard.append(events[0].id)
        for stream in streams:
            stream.__exit__(None, None, None)
    assert heard == [str(seq)] * 4


def test_a_retrofitted_apps_contract_router_pushes_under_its_prefix(domain, serve):
    """An existing app with the contract router under ``/api``: the agent's origin names the
    prefix, and the watch (``/api/contract/watch``) evicts the stale fix while it idles."""
    from invalidation_contracts.httpx import default_origin

    from .test_retrofit import Shop

    shop = Shop(domain)
    memory = FixMemory("row")
    with serve(shop.app, graceful_s=0.5) as url:
        origin = f"{url}/api"
        with contract_client(
            memory, base_url=url, watch=FAST, origin_of=lambda u: f"{default_origin(u)}/api"
        ) as client:
            assert client.post("/v1/orders", json=DRAFT).status_code == 422
            assert memory.lookup(origin, DRAFT, operation=ORDER).entries
            _wait(lambda: watches(client).is_open(origin))
            rows = {**PLANS, "enterprise": {"funding": "invoice", "promo": "ENT20"}}
            reload = httpx.post(
                f"{url}/api/admin/reload-table",
                json={"table": "plans", "rows": rows},
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            assert reload.status_code == 200, reload.text
            assert watches(client).caught_up(origin, reload.json()["contract_seq"], timeout_s=10)
            assert list(memory.lookup(origin, DRAFT, operation=ORDER).entries) == []


def test_a_lookup_at_once_after_a_watch_event_serves_no_stale_fix(domain, serve):
    """The drift window is 0: the refresh the event starts is held back, and a lookup made
    meanwhile (the event heard, its diff not yet applied) serves nothing stale."""
    import threading

    memory = FixMemory("row")
    entered, release = threading.Event(), threading.Event()
    with serve(_app(domain)) as url:
        with contract_client(memory, base_url=url, watch=FAST) as client:
            client.post("/v1/orders", json=DRAFT)
            assert memory.lookup(url, DRAFT, operation=ORDER).entries
            _wait(lambda: watches(client).is_open(url))
            watch = watches(client)._by_origin[url]
            refresh = watch._refresh

            def held_back() -> None:
                entered.set()
                release.wait(10)
                refresh()

            watch._refresh = held_back  # type: ignore[method-assign]
            seq = _drift(url)
            assert entered.wait(10), "the watch never heard of the change"
            during = list(memory.lookup(url, DRAFT, operation=ORDER).entries)
            release.set()
            assert watches(client).caught_up(url, seq, timeout_s=10)
            after = list(memory.lookup(url, DRAFT, operation=ORDER).entries)
    assert during == [] and after == []
