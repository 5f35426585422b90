"""What the host is shown: upstream results and listings without the contract, fixes at L2.

Pure functions over the SDK's models. The contract is for the proxy's memory, never for the host
(its model would be billed for it and could act on stale metadata): every ``_meta`` key of the
extension (either prefix) is stripped from tools and results, and a contract answer's content is
replaced by its model view (``client.modelview``). A contract-speaking tool's error result carries
no ``structuredContent``: the tool's ``outputSchema`` describes its success view, and hosts on the
official TypeScript SDK reject an error whose structured content does not match it. Fixes the
proxy could not patch into a call are shown to the model as the L2 instruction list
(``client.prompting``), one extra text block of the result, and after the tool's description.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import mcp_types as types

from ...client.entries import MemoryEntry
from ...client.modelview import model_text, model_view
from ...client.prompting import render_memory_block
from ...protocol.levels import Level
from .. import names


def without_contract(meta: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``meta`` less every key of the extension (``names.PREFIX`` or ``names.LEGACY_PREFIX``);
    None when nothing is left."""
    if not meta:
        return None
    kept = {
        key: value
        for key, value in meta.items()
        if not key.startswith((names.PREFIX, names.LEGACY_PREFIX))
    }
    return kept or None


def host_tool(tool: types.Tool, shown: str = "") -> types.Tool:
    """An upstream tool as the host lists it: its contract ``_meta`` keys dropped, and ``shown``
    (the L2 text of its valid fixes the proxy cannot patch in; empty: none) after its
    description."""
    meta = without_contract(tool.meta)
    update: dict[str, Any] = {} if meta == tool.meta else {"meta": meta}
    if shown:
        update["description"] = f"{tool.description}\n\n{shown}" if tool.description else shown
    return tool.model_copy(update=update) if update else tool


def host_result(
    result: types.CallToolResult,
    body: Mapping[str, Any],
    unpatched: Sequence[MemoryEntry] = (),
) -> types.CallToolResult:
    """A contract tool's result as the host is shown it.

    ``body``: the contract answer the memory read (empty: the result is not one, and only its
    contract ``_meta`` is dropped). ``unpatched``: valid fixes of this call the proxy did not
    patch in, shown as the L2 instruction list after the answer.
    """
    others = [block for block in result.content if not isinstance(block, types.TextContent)]
    if body:
        content: list[types.ContentBlock] = [
            types.TextContent(type="text", text=model_text(body, joined_detail=False)),
            *others,
        ]
        structured = None if result.is_error else model_view(body, joined_detail=False)
    else:
        content = list(result.content)
        structured = None if result.is_error else result.structured_content
    block = render_memory_block(unpatched, Level.PATCH_PROTOCOL)
    if block:
        content.append(types.TextContent(type="text", text=block))
    return types.CallToolResult(
        content=content,
        structured_content=structured,
        is_error=result.is_error,
        _meta=without_contract(result.meta),
    )


def result_size(result: types.CallToolResult) -> int:
    """The bytes of ``result`` as JSON (what the bound on an upstream's results counts)."""
    return len(result.model_dump_json(by_alias=True, exclude_none=True))
