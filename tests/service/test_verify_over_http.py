"""``verify`` over HTTP end to end (issue 37): a server at level ``none`` on loopback, the agent's
own ``ContractTransport``, and the conditional reads of the rows its 422 cited."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from tests.service.conftest import TOKEN, running

from invalidation_contracts.client import EvictionReason, FixMemory, MemoryEvent, Revalidated
from invalidation_contracts.client.events import Evicted, ReadResource
from invalidation_contracts.httpx import EPISODE_EXTENSION, ContractTransport, default_origin
from invalidation_contracts.server.http.app import create_app

pytestmark = pytest.mark.workers

ENTERPRISE = {"plan": "enterprise", "promo_code": "ENT10"}


@pytest.fixture
def served(domain) -> Iterator[tuple[str, object]]:
    app = create_app(domain, level="none", admin_token=TOKEN)
    with running(app) as url:
        yield url, app.state.registry


def lookup_after_reads(
    memory: FixMemory, transport: ContractTransport, origin: str, episode: int
) -> list[str]:
    """Look up as an agent does: fetch the conditional reads the lookup asks for, look up again."""
    found = memory.lookup(origin, ENTERPRISE, episode=episode, operation="POST /v1/orders")
    reads = [need for need in found.needs if isinstance(need, ReadResource)]
    assert reads, "a fix learned in an earlier episode is revalidated first"
    assert transport.fulfil(reads, episode=episode) == ()
    again = memory.lookup(origin, ENTERPRISE, episode=episode, operation="POST /v1/orders")
    return [entry.id for entry in again.entries]


def test_a_fix_is_kept_while_its_rows_answer_304_and_evicted_once_one_moved(served):
    url, registry = served
    events: list[MemoryEvent] = []
    memory = FixMemory("verify")
    transport = ContractTransport(memory, listener=events.append)
    with httpx.Client(transport=transport, base_url=url, timeout=30) as http:
        origin = default_origin(httpx.URL(url))
        answer = http.post("/v1/orders", json=ENTERPRISE, extensions={EPISODE_EXTENSION: 1})
        assert answer.status_code == 422
        [entry] = memory.entries(origin)
        learned = [e.outcome for e in events if isinstance(e, Revalidated)]
        assert learned == ["learned", "learned"]  # plans/enterprise and funding_types/invoice

        assert lookup_after_reads(memory, transport, origin, 2) == [entry.id]
        assert [e.outcome for e in events if isinstance(e, Revalidated)][2:] == ["not-modified"] * 2

        registry.patch("funding_types", upsert={"invoice": {"label": "Invoice (net 30)"}})
        assert lookup_after_reads(memory, transport, origin, 3) == []
        [evicted] = [e for e in events if isinstance(e, Evicted)]
        assert evicted.reason is EvictionReason.ROW_CHANGED
        assert "/resources/funding_types/invoice changed" in evicted.detail
