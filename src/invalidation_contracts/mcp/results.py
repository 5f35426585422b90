"""Reading MCP results for the memory: a tool result as a response, a resource read as an answer.

Pure functions over the SDK's result models. A tool result is a response whose status is 200, or
for ``isError`` the problem document's ``status``; its body is the contract answer, as received,
for the memory (the model is shown ``client.modelview``): the result's ``_meta`` ``CONTRACT``
when the server sends it (the ``meta`` envelope), else its structured content (the ``inline``
envelope, or a server that does not speak the contract). An ``isError`` result whose answer is
not a problem document, an answer that is not a JSON object, or a ``CONTRACT`` that is not one,
is not a contract answer: the memory is not given it, and the call reports an ``Ignored`` event.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from ..client.limits import DEFAULT_LIMITS, Limits, Refusal, parse_json
from ..protocol.wirecost import WireCost, compact, wire_cost
from . import names

#: The status a failed tool result without a readable problem status is observed as (bad
#: gateway). A resource read has no such stand-in: its status is None (``Answer.unusable``).
UNREADABLE_STATUS = 502
#: The status a not-modified answer to a conditional tool call is observed as (HTTP's 304).
NOT_MODIFIED_STATUS = 304


@dataclass(frozen=True, slots=True)
class ToolAnswer:
    """One tool result as the memory reads it."""

    status: int
    body: dict[str, Any]
    delta_since: int | None = None
    signature: str | None = None
    size: int | None = None
    cost: WireCost | None = None
    ignored: str | None = None
    """Why the memory is not given this result (None: it is)."""


def read_tool_result(result: types.CallToolResult) -> ToolAnswer:
    """What the memory reads of a tool result."""
    meta = result.meta or {}
    structured = result.structured_content
    if names.meta_value(meta, names.NOT_MODIFIED) is True:
        return ToolAnswer(
            NOT_MODIFIED_STATUS,
            {},
            ignored="not modified: the answer the presented validator stands for still holds",
        )
    if names.CONTRACT in meta:
        structured = meta[names.CONTRACT]
        if not isinstance(structured, dict):
            return ToolAnswer(
                UNREADABLE_STATUS if result.is_error else 200,
                {},
                ignored=f"the _meta contract is a JSON {type(structured).__name__}, not an object",
            )
    if structured is None:
        plain = UNREADABLE_STATUS if result.is_error else 200
        return ToolAnswer(plain, {}, size=_text_size(result))
    if not isinstance(structured, dict):
        return ToolAnswer(
            UNREADABLE_STATUS if result.is_error else 200,
            {},
            ignored=f"structured content is a JSON {type(structured).__name__}, not an object",
        )
    status: int | None = problem_status(structured) if result.is_error else 200
    if status is None:
        return ToolAnswer(
            UNREADABLE_STATUS,
            {},
            ignored="an error result whose structured content is not a problem document "
            "(no status 400-599)",
        )
    return ToolAnswer(
        status,
        structured,
        delta_since=_seq(names.meta_value(meta, names.SINCE)),
        signature=_text(names.meta_value(meta, names.SIGNATURE)),
        size=len(compact(structured)),
        cost=wire_cost(structured),
    )


@dataclass(frozen=True, slots=True)
class ResourceAnswer:
    """A contract resource as ``FixMemory.answer`` takes it."""

    status: int | None
    """200, a problem document's status, or None: nothing readable came (no text content, a
    problem document without a status)."""
    body: object
    signature: str | None
    body_bytes: int
    delta_since: int | None = None
    """The ``since`` the server echoed: ``table_versions`` lists only tables moved after it."""
    refused: Refusal | None = None
    """A bound the text broke (its size, its nesting): it was not parsed, and ``body`` is None."""


def read_resource_result(
    result: types.ReadResourceResult,
    limits: Limits = DEFAULT_LIMITS,
    bound: str = "max_feed_bytes",
) -> ResourceAnswer:
    """The first content of a resource read: JSON (200) or a problem document (its status).

    The text is the server's: it is parsed only within ``limits`` (its size under the ``bound``
    field, ``max_feed_bytes`` for a need's answer; its nesting under ``max_json_depth``), as the
    httpx transport reads a body."""
    content = result.contents[0] if result.contents else None
    if not isinstance(content, types.TextResourceContents):
        return ResourceAnswer(None, None, None, 0)
    raw = content.text.encode()
    size = len(raw)
    body: object = None
    refused: Refusal | None = None
    if size > getattr(limits, bound):
        refused = Refusal(bound, size)
    else:
        body, refused = parse_json(raw, limits.max_json_depth)
    meta = content.meta or {}
    signature = _text(names.meta_value(meta, names.SIGNATURE))
    if content.mime_type == names.PROBLEM_MEDIA_TYPE:
        status = problem_status(body) if isinstance(body, dict) else None
        return ResourceAnswer(status, body, signature, size, refused=refused)
    since = _seq(names.meta_value(meta, names.SINCE))
    return ResourceAnswer(200, body, signature, size, since, refused)


def problem_status(body: Mapping[str, Any]) -> int | None:
    """The ``status`` of a problem document (400-599), or None when ``body`` is not one."""
    status = body.get("status")
    if isinstance(status, int) and not isinstance(status, bool) and 400 <= status <= 599:
        return status
    return None


def _text_size(result: types.CallToolResult) -> int:
    return sum(
        len(block.text.encode()) for block in result.content if isinstance(block, types.TextContent)
    )


def _seq(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
