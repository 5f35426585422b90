"""An agent's HTTP client gains the invalidation contract by wrapping its transport.

Needs the ``server`` extra for the in-process provider and the ``httpx`` extra for the agent's
transport: ``pip install '.[server,httpx]'``.

Runs against the Acme billing provider in-process (an ASGI transport), so it needs no network:
    python docs/examples/agent_memory.py [MEMORY_FILE]
The memory is kept in MEMORY_FILE when one is named (``invalidation-contracts memory`` reads it),
else in a temporary folder.
"""

import asyncio
import sys
import tempfile
from pathlib import Path

import httpx

from invalidation_contracts.client import AsyncFixMemory
from invalidation_contracts.domains import get_catalog
from invalidation_contracts.httpx import async_contract_client
from invalidation_contracts.server.http.app import create_app


async def main(store: Path) -> None:
    catalog = get_catalog("acme_billing")
    app = create_app(catalog.domain, level=6, admin_token="operator-secret")
    task = catalog.family("governed-partner-growth").draft()

    async with AsyncFixMemory("row", store=store) as memory:  # store: a SQLite file
        transport = httpx.ASGITransport(app=app)
        async with async_contract_client(
            memory, transport=transport, base_url="http://acme.test"
        ) as http:
            first = await http.post("/v1/subscriptions", json=task)  # 422: a fix is learned
            learned = [e.type for e in await memory.entries("http://acme.test")]
            print("first try:", first.status_code, "-> learned", learned)

            # episode 2: reuse it (fixes are filed under the operation: METHOD + route)
            operation = "POST /v1/subscriptions"
            found = await memory.lookup("http://acme.test", task, operation=operation)
            (fix,) = found.entries
            second = await http.post(
                "/v1/subscriptions", json={**task, **fix.suggestion.parameters}
            )
            print("with the cached fix:", second.status_code)

            rotation = catalog.read_snapshot(
                "active_csm_codes.rotation-1"
            )  # the operator rotates codes
            await http.post(
                "/admin/reload-table",
                json={"table": rotation.table, "rows": rotation.rows},
                headers={"Authorization": "Bearer operator-secret"},
            )
            await http.post(
                "/v1/subscriptions", json=catalog.family("plain-starter-monthly").draft()
            )
            reasons = [t.reason.value for t in await memory.tombstones("http://acme.test")]
            live = await memory.entries("http://acme.test")
            print("after the rotation: live", live, "evicted", reasons)


if __name__ == "__main__":
    named = sys.argv[1:2]
    asyncio.run(main(Path(named[0]) if named else Path(tempfile.mkdtemp()) / "memory.sqlite"))
