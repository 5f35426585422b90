"""One contract-read API (``Provider.read``) behind both transports: the MCP resources answer
what the HTTP routes answer, and a lagging worker catches up to the client's position before it
answers rules or the graph over MCP, as it does over HTTP (SPEC §8.2 rule 3). Real MCP client and
server (in process), workers over one SQLite registry that never follow by themselves."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest
from mcp.client.client import Client
from tests.mcp.conftest import run

from invalidation_contracts.domains import get_catalog
from invalidation_contracts.mcp import contract_server, names
from invalidation_contracts.mcp.results import read_resource_result
from invalidation_contracts.server.http.app import create_app
from invalidation_contracts.server.http.service import ContractService

pytestmark = [pytest.mark.mcp, pytest.mark.timeout(120)]

ACME = get_catalog("acme_billing")


def drift(store: Path) -> int:
    """Another worker rotates a table and drops a rule; returns the seq it reached."""
    writer = ContractService.open(ACME.domain, store=str(store))
    try:
        snapshot = ACME.read_snapshot("active_csm_codes.rotation-1")
        writer.reload(snapshot.table, snapshot.rows, snapshot.version)
        result = writer.set_rules(list(writer.registry.state.rules)[:-1])
        return result.contract_seq
    finally:
        writer.close()


async def mcp_read(service: ContractService, uri: str, position: int | None) -> dict:
    meta = names.MetaPosition(position).to_meta() if position is not None else None
    async with Client(contract_server(service)) as client:
        result = await client.session.read_resource(uri, meta=meta)
    answer = read_resource_result(result)
    assert answer.status == 200, answer.body
    return answer.body


async def http_read(app, path: str, position: int | None) -> dict:
    headers = {"Contract-Since": str(position)} if position is not None else {}
    transport = httpx.ASGITransport(app=app)  # no lifespan: the worker never follows by itself
    async with httpx.AsyncClient(transport=transport, base_url="http://worker.test") as http:
        response = await http.get(path, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("read", ["rules", "graph"])
def test_a_lagging_worker_catches_up_to_the_clients_position_over_mcp_as_over_http(tmp_path, read):
    store = tmp_path / "registry.sqlite"
    lagging_mcp = ContractService.open(ACME.domain, store=str(store))  # opened, never started
    lagging_http = create_app(ACME.domain, store=store, max_lag_s=120.0)  # the read is the subject
    seq = drift(store)
    try:
        behind = run(lambda: mcp_read(lagging_mcp, f"contract://{read}", None))
        over_mcp = run(lambda: mcp_read(lagging_mcp, f"contract://{read}", seq))
        over_http = run(lambda: http_read(lagging_http, f"/contract/{read}", seq))
        current = run(
            lambda: mcp_read(
                ContractService.open(ACME.domain, store=str(store)), f"contract://{read}", None
            )
        )
    finally:
        lagging_mcp.close()
        lagging_http.state.service.close()

    assert behind != current  # without a position the worker answers what it has
    assert over_mcp == current  # with one, it catches up first
    assert over_http == over_mcp  # the same read, the same answer


def test_a_position_in_the_uri_catches_up_too(tmp_path):
    store = tmp_path / "registry.sqlite"
    lagging = ContractService.open(ACME.domain, store=str(store))
    seq = drift(store)
    try:
        rules = run(lambda: mcp_read(lagging, f"contract://rules?since={seq}", None))
        current = lagging.registry.state.rules_listing().to_wire()
    finally:
        lagging.close()

    assert rules == current


@pytest.mark.parametrize(
    ("uri", "path"),
    [
        ("contract://versions?since=0", "/contract/versions"),
        ("contract://changes?since=0", "/contract/changes?since=0"),
        ("contract://rules", "/contract/rules"),
        ("contract://graph", "/contract/graph"),
    ],
)
def test_both_transports_answer_the_same_body_for_the_same_read(tmp_path, uri, path):
    store = tmp_path / "registry.sqlite"
    drift(store)
    # never started: fresh for max_lag_s after opening; the bound is not what this test is about
    app = create_app(ACME.domain, store=store, max_lag_s=120.0)
    service = app.state.service
    try:
        position = 0 if "versions" in uri else None
        over_mcp = run(lambda: mcp_read(service, uri, None))
        headers_position = position
        over_http = run(lambda: http_read(app, path, headers_position))
    finally:
        service.close()

    assert over_mcp == over_http


class Threads(ContractService):
    """A real worker service that notes the thread each contract state is read in."""

    seen: list[int]

    def state(self, since=None, epoch=None):
        self.seen.append(threading.get_ident())
        return super().state(since, epoch)


def test_a_read_at_the_workers_position_is_answered_in_the_event_loop(tmp_path):
    service = Threads.open(ACME.domain, store=str(tmp_path / "registry.sqlite"))
    service.seen = []

    async def read_and_note() -> tuple[dict, int]:
        return await mcp_read(service, "contract://rules", 0), threading.get_ident()

    try:
        body, loop_thread = run(read_and_note)
    finally:
        service.close()

    assert service.seen == [loop_thread]  # no hop to a worker thread for an in-memory read
    assert body == service.registry.state.rules_listing().to_wire()


def test_a_read_that_catches_up_first_runs_in_a_worker_thread(tmp_path):
    store = tmp_path / "registry.sqlite"
    lagging = Threads.open(ACME.domain, store=str(store))
    lagging.seen = []
    seq = drift(store)

    async def read_and_note() -> tuple[dict, int]:
        return await mcp_read(lagging, "contract://rules", seq), threading.get_ident()

    try:
        body, loop_thread = run(read_and_note)
        current = lagging.registry.state.rules_listing().to_wire()
    finally:
        lagging.close()

    assert len(lagging.seen) == 1 and lagging.seen[0] != loop_thread  # it may read the store
    assert body == current
