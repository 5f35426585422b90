"""A tool call's reply as a contract session returns it: the result, what the memory read of it,
and what the memory did."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mcp_types as types

from ..client.events import MemoryEvent, Need
from ..client.modelview import model_text, model_view
from ..protocol.wirecost import WireCost


@dataclass(frozen=True, slots=True)
class ToolReply:
    """A tool call's result, what the memory read of it, and what it did."""

    result: types.CallToolResult
    status: int
    """200, or the problem document's status for an ``isError`` result."""
    body: dict[str, Any]
    """The structured content as received (what the memory was given)."""
    events: tuple[MemoryEvent, ...] = ()
    """Every memory event the call caused, its needs' included."""
    cost: WireCost | None = None
    outstanding: tuple[Need, ...] = field(default=())

    @property
    def is_error(self) -> bool:
        return bool(self.result.is_error)

    @property
    def for_model(self) -> str:
        """The result as the model is shown it: the contract answer without the contract's
        metadata (``client.modelview``), else the result's text."""
        if self.body:
            return model_text(self.body, joined_detail=False)
        return "\n".join(
            block.text for block in self.result.content if isinstance(block, types.TextContent)
        )

    def to_call_tool_result(self) -> types.CallToolResult:
        """The model view as a ``CallToolResult`` (for a framework that shows results as they
        are): ``for_model`` as its text, the model view as its structured content, no
        ``_meta``."""
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=self.for_model)],
            structured_content=model_view(self.body, joined_detail=False) if self.body else None,
            is_error=self.is_error,
        )
