"""An MCP agent loop that learns a fix, sees a table rotate, and stops injecting the stale fix.

Needs the ``mcp`` extra: ``pip install '.[mcp]'``.

The Acme billing provider is served as an MCP tool server over streamable HTTP on 127.0.0.1 (in
this process, so the operator's rotation below is one call); the agent is a real MCP client
whose session feeds a fix memory. No network beyond 127.0.0.1, no model: the "model" here copies
the fixes it is shown into its arguments, as a compliant model does. Run it as is:
    python docs/examples/mcp_agent.py
"""

import json

import anyio

from invalidation_contracts.client import FixMemory
from invalidation_contracts.domains import get_catalog
from invalidation_contracts.mcp import connect, contract_server
from invalidation_contracts.mcp.serve import running_http
from invalidation_contracts.protocol.levels import Level
from invalidation_contracts.server import Provider

TOOL = "create_subscription"


async def episode(tools, task: dict, number: int) -> None:
    """One episode: inject what the memory knows, call, and on a rejection apply what the server
    suggests (the memory learns the fix from the rejection by itself)."""
    fixes = (await tools.lookup(TOOL, task, episode=number)).entries
    # What a model would be given: the fixes as amendments already applied to the task (L3).
    shown = tools.prompt("You call Acme's billing tools.", fixes, Level.AMENDED_INPUT, task)
    if fixes:
        print(shown.memory_block.splitlines()[0])
    arguments = {**task, **{k: v for f in fixes for k, v in f.suggestion.parameters.items()}}
    reply = await tools.call_tool(TOOL, arguments, episode=number, injected=fixes)
    attempts = 1
    while reply.is_error and attempts < 3:
        seen = json.loads(reply.for_model)  # what the model is shown: no contract metadata
        if number == 1:
            print("kept from the model:", sorted(set(reply.body) - set(seen)))
        for suggestion in seen["recovery_feedback"]["suggestions"]:
            arguments.update(suggestion["parameters"])
        reply = await tools.call_tool(TOOL, arguments, episode=number, injected=fixes)
        attempts += 1
    injected = [f.suggestion.parameters for f in fixes]
    print(f"episode {number}: injected {injected}, {attempts} attempt(s), status {reply.status}")


async def main() -> None:
    catalog = get_catalog("acme_billing")
    provider = Provider(catalog.domain)  # level 6: the full contract
    server = contract_server(provider, tool_names={"POST /v1/subscriptions": TOOL})
    task = catalog.family("governed-partner-growth").draft()

    with FixMemory("row") as memory:  # strategy A2D; pass store="memory.sqlite" to keep it
        async with running_http(server) as url, connect(url, memory) as tools:
            await episode(tools, task, 1)  # learns the promo code the plan's CSM assigned
            await episode(tools, task, 2)  # injects it: first try

            rotation = catalog.read_snapshot("active_csm_codes.rotation-1")
            result = await anyio.to_thread.run_sync(  # the operator rotates the codes
                provider.registry.reload, rotation.table, rotation.rows, rotation.version
            )
            # The server pushed resources/updated; the session read the changes feed and
            # evicted the stale fix. (An agent need not wait: this only makes the print exact.)
            await tools.caught_up(result.contract_seq)
            reasons = [t.reason.value for t in memory.tombstones(tools.origin)]
            print("after the rotation, before any call: evicted", reasons)

            await episode(tools, task, 3)  # nothing stale injected; the new code is learned
            await episode(tools, task, 4)


if __name__ == "__main__":
    anyio.run(main)
