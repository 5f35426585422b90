"""A real MCP server (the SDK's low-level ``Server``) that answers tool calls with scripted
results: what a broken or hostile contract server sends, for the client's bad-input tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server

from invalidation_contracts.domains.catalog import DomainCatalog
from invalidation_contracts.server import Provider


def scripted_server(
    catalog: DomainCatalog, answer: Callable[[dict[str, Any]], types.CallToolResult]
) -> Server[Any]:
    """A server named ``scripted`` with the catalog route's tool, answered by ``answer``."""
    tool = types.Tool(
        name="create_subscription", input_schema=catalog.route.request_model.model_json_schema()
    )

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return answer(dict(params.arguments or {}))

    return Server("scripted", on_list_tools=list_tools, on_call_tool=call_tool)


def error_result(structured: Any) -> types.CallToolResult:
    """An ``isError`` result with ``structured`` as its structured content."""
    return types.CallToolResult(
        content=[types.TextContent(type="text", text="rejected")],
        structured_content=structured,
        is_error=True,
    )


def acme_problem(catalog: DomainCatalog, arguments: dict[str, Any]) -> dict[str, Any]:
    """The problem document the real Acme provider answers ``arguments`` with."""
    outcome = Provider(catalog.domain).handle(catalog.route, arguments)
    return outcome.body.to_wire()
