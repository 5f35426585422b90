"""A provider's routes as MCP tools, and a route's answer as a tool result.

One tool per route: its name (``names.tool_name`` unless the caller names it), its input schema
the route's request model, its ``_meta`` the operation it performs over HTTP and the fields a
client may patch. A success answers the ``SuccessResponse``; any problem (a policy violation, a
body that does not match the schema, a worker that cannot vouch for its state) is ``isError``
with the problem document.

Where the answer goes is the envelope. ``meta`` (the default): the whole answer, contract
included, is the result's ``_meta`` ``names.CONTRACT``; the text is its model view
(``client.modelview``: no contract metadata, no detail that only repeats the suggestions'
messages), so a host that shows results to the model as they are shows it only what it acts on.
A success's structured content is that model view too (what ``outputSchema`` describes); an
``isError`` result has none: the TypeScript SDK validates structured content against the
published schema whatever ``isError`` says (docs/decisions.md). ``inline`` (0.1's wire form, for
0.1 clients): the answer is the structured content and the text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from ..client.modelview import model_text, model_view
from ..protocol.models import Problem, SuccessResponse
from ..server.domain import Domain, Route
from . import names


@dataclass(frozen=True, slots=True)
class ToolRoute:
    """One tool: the route it calls, and its name and operation."""

    name: str
    operation: str
    route: Route[Any]

    def tool(self, domain: Domain, envelope: str = names.META_ENVELOPE) -> types.Tool:
        route = self.route
        return types.Tool(
            name=self.name,
            description=route.summary or domain.description or f"{self.operation} ({domain.name})",
            input_schema=route.request_model.model_json_schema(),
            output_schema=output_schema(route) if envelope == names.META_ENVELOPE else None,
            annotations=tool_annotations(route.method),
            _meta={
                names.key_for(names.OPERATION, envelope): self.operation,
                names.key_for(names.PATCHABLE, envelope): sorted(route.patchable_fields),
            },
        )


#: Tool hints by HTTP method: (read-only, destructive, idempotent). A POST or PATCH may move
#: money or state for good (a subscription is a charge), so it is marked destructive.
_HINTS = {
    "GET": (True, False, True),
    "HEAD": (True, False, True),
    "PUT": (False, True, True),
    "DELETE": (False, True, True),
}


def tool_annotations(method: str) -> types.ToolAnnotations:
    """The MCP hints of a route, from its HTTP method's semantics (RFC 9110 §9.2)."""
    read_only, destructive, idempotent = _HINTS.get(method.upper(), (False, True, False))
    return types.ToolAnnotations(
        read_only_hint=read_only, destructive_hint=destructive, idempotent_hint=idempotent
    )


def output_schema(route: Route[Any]) -> dict[str, Any] | None:
    """The schema of a success's model view (``{"result": ..., "success": true}``) when the
    route declares its ``response_model``; None otherwise (MCP: no ``outputSchema``)."""
    if route.response_model is None:
        return None
    result = route.response_model.model_json_schema()
    defs = result.pop("$defs", None)  # its "#/$defs/..." references resolve at the root
    return {
        "type": "object",
        "properties": {"result": result, "success": {"const": True}},
        "required": ["result", "success"],
        **({"$defs": defs} if defs else {}),
    }


class ToolTable:
    """The tools of a domain, by name."""

    def __init__(
        self,
        domain: Domain,
        tool_names: Mapping[str, str] | None = None,
        envelope: str = names.META_ENVELOPE,
    ) -> None:
        """``tool_names``: ``{"POST /v1/subscriptions": "create_subscription"}`` to rename."""
        self.domain = domain
        chosen = dict(tool_names or {})
        self.routes: dict[str, ToolRoute] = {}
        for route in domain.routes:
            operation = f"{route.method.upper()} {route.path}"
            name = names.check_tool_name(
                chosen.pop(operation, "") or names.tool_name(route.method, route.path)
            )
            if name in self.routes:
                raise ValueError(f"two routes of {domain.name} would both be the tool {name!r}")
            self.routes[name] = ToolRoute(name, operation, route)
        if chosen:
            raise ValueError(f"tool_names names no route of {domain.name}: {sorted(chosen)}")
        self.tools = [entry.tool(domain, envelope) for entry in self.routes.values()]

    def get(self, name: str) -> ToolRoute | None:
        return self.routes.get(name)


def tool_result(
    body: Problem | SuccessResponse,
    *,
    since: int | None = None,
    signature: str | None = None,
    envelope: str = names.META_ENVELOPE,
) -> types.CallToolResult:
    """The result of a tool call that ``body`` answers; ``since`` echoed when it is a delta."""
    meta: dict[str, Any] = {}
    wire = body.to_wire()
    structured: dict[str, Any] | None
    if envelope == names.INLINE_ENVELOPE:
        structured, text = wire, body.to_json().decode()
    else:
        meta[names.CONTRACT] = wire
        # the problem's model view is the text only: the outputSchema describes successes
        structured = None if isinstance(body, Problem) else model_view(wire, joined_detail=False)
        text = model_text(wire, joined_detail=False)
    if since is not None:
        meta[names.key_for(names.SINCE, envelope)] = since
    if signature is not None:
        meta[names.key_for(names.SIGNATURE, envelope)] = signature
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=isinstance(body, Problem),
        _meta=meta or None,
    )
