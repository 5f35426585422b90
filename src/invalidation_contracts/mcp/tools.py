"""A provider's routes as MCP tools, and a route's answer as a tool result.

One tool per route: its name (``names.tool_name`` unless the caller names it), its input schema
the route's request model, its ``_meta`` the operation it performs over HTTP and the fields a
client may patch. A success is a result whose structured content is the ``SuccessResponse``
(result and response-level contract); any problem (a policy violation, a body that does not match
the schema, a worker that cannot vouch for its state) is ``isError`` with the problem document as
structured content. Either way the text content is the same JSON, for hosts that show only text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from ..protocol.models import Problem, SuccessResponse
from ..server.domain import Domain, Route
from . import names


@dataclass(frozen=True, slots=True)
class ToolRoute:
    """One tool: the route it calls, and its name and operation."""

    name: str
    operation: str
    route: Route[Any]

    def tool(self, domain: Domain) -> types.Tool:
        route = self.route
        return types.Tool(
            name=self.name,
            description=route.summary or domain.description or f"{self.operation} ({domain.name})",
            input_schema=route.request_model.model_json_schema(),
            _meta={
                names.OPERATION: self.operation,
                names.PATCHABLE: sorted(route.patchable_fields),
            },
        )


class ToolTable:
    """The tools of a domain, by name."""

    def __init__(self, domain: Domain, tool_names: Mapping[str, str] | None = None) -> None:
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
        self.tools = [entry.tool(domain) for entry in self.routes.values()]

    def get(self, name: str) -> ToolRoute | None:
        return self.routes.get(name)


def tool_result(
    body: Problem | SuccessResponse,
    *,
    since: int | None = None,
    signature: str | None = None,
) -> types.CallToolResult:
    """The result of a tool call that ``body`` answers; ``since`` echoed when it is a delta."""
    meta: dict[str, Any] = {}
    if since is not None:
        meta[names.SINCE] = since
    if signature is not None:
        meta[names.SIGNATURE] = signature
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=body.to_json().decode())],
        structured_content=body.to_wire(),
        is_error=isinstance(body, Problem),
        _meta=meta or None,
    )
