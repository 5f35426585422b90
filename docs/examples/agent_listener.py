"""What one request did to the memory: a listener per request, needs fetched with ``fulfil``.

Needs the ``server`` extra for the in-process provider and the ``httpx`` extra for the agent's
transport: ``pip install '.[server,httpx]'``.

Runs against the Acme billing provider in-process (an ASGI transport), no network:
    python docs/examples/agent_listener.py
"""

import asyncio

import httpx

from invalidation_contracts.client import FixMemory
from invalidation_contracts.domains import get_catalog
from invalidation_contracts.httpx import (
    EPISODE_EXTENSION,
    LISTENER_EXTENSION,
    WIRE_COST_EXTENSION,
    AsyncContractTransport,
)
from invalidation_contracts.server.http.app import create_app


async def main() -> None:
    catalog = get_catalog("acme_billing")
    app = create_app(catalog.domain, level=6, admin_token="operator-secret")
    draft = catalog.family("governed-partner-growth").draft()

    with FixMemory("row", detection="resync") as memory:
        transport = AsyncContractTransport(memory, httpx.ASGITransport(app=app))
        async with httpx.AsyncClient(transport=transport, base_url="http://acme.test") as http:
            events = []
            outstanding = await transport.fulfil(  # resync detection asks before the episode
                memory.begin_episode("http://acme.test", 7), episode=7, listener=events.append
            )
            r = await http.post(
                "/v1/subscriptions",
                json=draft,
                extensions={EPISODE_EXTENSION: 7, LISTENER_EXTENSION: events.append},
            )
            cost = r.extensions[WIRE_COST_EXTENSION]  # WireCost: contract bytes and more
            print("status", r.status_code, "outstanding needs", outstanding)
            print("events:", [type(event).__name__ for event in events])
            print("contract bytes", cost.contract, "of", cost.total)


if __name__ == "__main__":
    asyncio.run(main())
