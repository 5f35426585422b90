"""Restart and drift over HTTP: the server keeps its history in a registry file, the data changes
while the agent is away (the server restarted in between), and a new agent process serves 0 stale
fixes — the stale one is evicted by the confirmation read when its client opens, the others are
served as they were (real uvicorn processes, sync and async httpx transports)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from tests.support.processes import free_port, serving

from invalidation_contracts.client import AsyncFixMemory, FixMemory
from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.client.events import FetchChanges, MemoryEvent, Served
from invalidation_contracts.domains import get_catalog
from invalidation_contracts.httpx import async_contract_client, contract_client
from invalidation_contracts.server.http.service import ContractService

pytestmark = [pytest.mark.workers, pytest.mark.timeout(180)]

ROUTE = "/v1/subscriptions"
OPERATION = f"POST {ROUTE}"
ACME = get_catalog("acme_billing")
GROWTH = ACME.family("governed-partner-growth").draft()  # its CSM code rotates at rotation-1
STARTER = ACME.family("control-partner-starter").draft()  # a row the rotation leaves alone


def learn_both(url: str, memory_path: Path) -> None:
    """Session 1: the agent learns the growth and the starter plans' CSM codes, then exits."""
    with (
        FixMemory("row", store=memory_path) as memory,
        contract_client(memory, base_url=url) as client,
    ):
        for draft in (GROWTH, STARTER):
            assert client.post(ROUTE, json=draft).status_code == 422
            (fix,) = memory.lookup(url, draft, operation=OPERATION).entries
            patched = {**draft, **fix.suggestion.parameters}
            assert client.post(ROUTE, json=patched).status_code == 200


def drift_while_away(registry: Path) -> None:
    """The operator rotates the growth plan's CSM code while no agent runs."""
    service = ContractService.open(ACME.domain, level=6, store=str(registry))
    try:
        snapshot = ACME.read_snapshot("active_csm_codes.rotation-1")
        service.reload(snapshot.table, snapshot.rows, snapshot.version)
    finally:
        service.close()


def restart_and_drift(tmp_path: Path) -> tuple[Path, Path, int]:
    """Session 1 against a server, the server stopped, the data changed: what a restart finds."""
    registry, memory_path = tmp_path / "registry.sqlite", tmp_path / "memory.sqlite"
    port = free_port()
    with serving(args(registry), tmp_path / "logs", port=port) as url:
        learn_both(url, memory_path)
    drift_while_away(registry)
    return registry, memory_path, port


def args(registry: Path) -> list[str]:
    return ["--domain", "acme_billing", "--db", str(registry)]


def test_a_new_sync_session_serves_no_stale_fix_after_drift_while_away(tmp_path):
    registry, memory_path, port = restart_and_drift(tmp_path)
    served: list[MemoryEvent] = []

    with serving(args(registry), tmp_path / "logs", port=port) as url:
        with FixMemory("row", store=memory_path) as memory:
            before = memory.lookup(url, GROWTH, operation=OPERATION)
            with contract_client(memory, base_url=url, listener=served.append) as client:
                growth = list(memory.lookup(url, GROWTH, operation=OPERATION).entries)
                (starter,) = memory.lookup(url, STARTER, operation=OPERATION).entries
                reply = client.post(ROUTE, json={**STARTER, **starter.suggestion.parameters})
            tombstones = memory.tombstones(url)

    assert before.entries == () and isinstance(before.needs[0], FetchChanges)
    assert growth == []  # the stale SUMMERSALE25 is never served
    assert reply.status_code == 200  # the starter fix, unmoved, is served and still right
    assert [t.reason for t in tombstones] == [EvictionReason.ROW_CHANGED]
    assert [t.entry.suggestion.parameters for t in tombstones] == [{"promo_code": "SUMMERSALE25"}]
    assert not [e for e in served if isinstance(e, Served)]


def test_a_new_async_session_serves_no_stale_fix_after_drift_while_away(tmp_path):
    registry, memory_path, port = restart_and_drift(tmp_path)

    async def session(url: str) -> tuple[list[str], int]:
        with FixMemory("row", store=memory_path) as memory:
            async with async_contract_client(memory, base_url=url) as client:
                aio = AsyncFixMemory.over(memory)
                growth = list((await aio.lookup(url, GROWTH, operation=OPERATION)).entries)
                (starter,) = (await aio.lookup(url, STARTER, operation=OPERATION)).entries
                reply = await client.post(ROUTE, json={**STARTER, **starter.suggestion.parameters})
                return [e.id for e in growth], reply.status_code

    with serving(args(registry), tmp_path / "logs", port=port) as url:
        growth, status = anyio.run(session, url)

    assert growth == [] and status == 200


def test_a_session_that_cannot_reach_the_server_serves_nothing(tmp_path):
    restart_and_drift(tmp_path)
    memory_path = tmp_path / "memory.sqlite"

    with FixMemory("row", store=memory_path) as memory:
        (origin,) = memory.origins()
        with contract_client(memory, base_url=origin):  # the server is down: the read fails
            served = list(memory.lookup(origin, STARTER, operation=OPERATION).entries)
            outstanding = memory.needs(origin)

    assert served == []  # withheld, never served on faith
    assert isinstance(outstanding[0], FetchChanges)
