"""The MCP watcher keeps an origin withheld when a change is announced while a refresh reads: what
that refresh read may predate the change, so only the next refresh releases it (issue 38 item 3).
"""

from __future__ import annotations

import anyio
import pytest
from tests.client.shared_model import ORIGIN, contract
from tests.client.test_confirmation import failure, served

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.values import Observed
from invalidation_contracts.mcp.watch import Watcher

pytestmark = pytest.mark.mcp


def test_an_announcement_during_a_refresh_keeps_the_origin_withheld_until_the_next():
    memory = FixMemory("row")
    memory.observe(ORIGIN, Observed(None, 422, failure(0)))
    after_first: list[list[str]] = []
    second = anyio.Event()

    async def refresh() -> int | None:
        if watcher.refreshes == 0:
            watcher.announced()  # a notification arrives while this refresh reads
            memory.observe(ORIGIN, Observed(None, 200, {"success": True, **contract(0)}))
            return 0
        after_first.append(served(memory))
        second.set()
        return 0

    watcher = Watcher(refresh, on_announced=lambda: memory.announced(ORIGIN))

    async def body() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(watcher.run)
            watcher.announced()
            with anyio.fail_after(5):
                await second.wait()
            tasks.cancel_scope.cancel()

    anyio.run(body)

    assert after_first == [[]]  # still withheld when the second refresh begins
    assert served(memory) == []  # the second refresh observed nothing: not yet confirmed
    memory.observe(ORIGIN, Observed(None, 200, {"success": True, **contract(0)}))
    assert served(memory) == ["e1"]
