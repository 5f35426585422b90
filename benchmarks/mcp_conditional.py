"""Study — bytes of a not-modified conditional tool answer against the full answer (issue 36).

A rejected ``tools/call`` (acme_billing's growth plan without its CSM code) carries a validator
(``mcp.conditional``); the same call presenting it while no stamp moved is answered "not
modified". Measured on one in-process SDK client and ``contract_server``, all in this run: the
``CallToolResult`` as the SDK serialises it on the wire (``by_alias``, no nulls), for the full
answer to a client with no position, the full answer to a client at the current position (its
``table_versions`` an empty delta: the smallest full answer the contract has), and the
not-modified answer; and the text each shows the model. Deterministic (bytes, not time): one
round.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
from mcp import Client

from invalidation_contracts.domains import get_catalog
from invalidation_contracts.mcp import contract_server, names
from invalidation_contracts.server import Provider

from .common import Check, StudyResult, markdown_table

NAME = "mcp_conditional"
TITLE = "Conditional tool calls: bytes of a not-modified answer against the full answer"
TARGET = 0.25
TOOL = "create_subscription"


def _wire(result: types.CallToolResult) -> int:
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


def _text(result: types.CallToolResult) -> int:
    return sum(len(b.text.encode()) for b in result.content if isinstance(b, types.TextContent))


async def _measure() -> dict[str, dict[str, int]]:
    acme = get_catalog("acme_billing")
    server = contract_server(Provider(acme.domain), tool_names={"POST /v1/subscriptions": TOOL})
    growth = acme.family("governed-partner-growth").draft()
    async with Client(server) as client:
        full = await client.call_tool(TOOL, growth)
        contract = (full.meta or {})[names.CONTRACT]
        position: Any = {
            names.SINCE: contract["contract_seq"],
            names.EPOCH: contract["contract_epoch"],
        }
        delta = await client.call_tool(TOOL, growth, meta=position)
        held: Any = {**position, names.IF_NONE_MATCH: (full.meta or {})[names.VALIDATOR]}
        short = await client.call_tool(TOOL, growth, meta=held)
    assert (short.meta or {}).get(names.NOT_MODIFIED) is True
    return {
        name: {"wire_bytes": _wire(r), "model_text_bytes": _text(r)}
        for name, r in (("full", full), ("full_at_position", delta), ("not_modified", short))
    }


def run(quick: bool = False, out_dir: Any = None) -> StudyResult:
    sizes = anyio.run(_measure)
    short = sizes["not_modified"]["wire_bytes"]
    ratio = short / sizes["full"]["wire_bytes"]
    ratio_delta = short / sizes["full_at_position"]["wire_bytes"]
    rows = [
        [name, str(s["wire_bytes"]), str(s["model_text_bytes"]), f"{short / s['wire_bytes']:.3f}"]
        for name, s in sizes.items()
    ]
    md = (
        __doc__.split("\n\n", 1)[1].strip()
        + "\n\n"
        + markdown_table(["answer", "wire bytes", "model text bytes", "not-modified / this"], rows)
    )
    check = Check(
        f"a not-modified answer is at most {TARGET:.2f}x the full answer's bytes",
        f"{ratio:.3f}x of the full answer ({ratio_delta:.3f}x of the full answer at the position)",
        ratio <= TARGET,
    )
    data = {"sizes": sizes, "ratio": ratio, "ratio_at_position": ratio_delta}
    return StudyResult(NAME, TITLE, md, [check], [], json.loads(json.dumps(data)))


if __name__ == "__main__":
    result = run()
    print(result.markdown)
    print(result.checks[0].measured)
