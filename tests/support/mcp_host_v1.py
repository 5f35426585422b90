"""A plain MCP host on the official Python SDK v1 (``mcp`` 1.x, no contract code), driven line by
line.

The v1 twin of ``mcp_host.py`` and ``node/mcp_host.mjs``: the same commands on stdin, the same
answers on stdout (one JSON object a line). v1 and v2 share the import name ``mcp``, so this
script runs in its own virtual environment (``mcp_hosts.v1_python``) and imports nothing of the
project but ``mcp_host_lines.py`` beside it. ``version`` is the revision the host offers in
``initialize`` (the SDK offers its latest otherwise: ``ClientSession.initialize`` reads
``mcp.types.LATEST_PROTOCOL_VERSION``, which the connect sets, as a host pinned to an older
revision would be); notifications come by ``resources/subscribe`` (v1 speaks no
``server/discover`` era).

usage: python mcp_host_v1.py   (with mcp 1.x importable)
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_host_lines import Heard, serve_lines
from pydantic import AnyUrl


class Host(Heard):
    """One v1 ``ClientSession``, the notifications it heard, and the commands over it."""

    def __init__(self) -> None:
        super().__init__()
        self.stack = AsyncExitStack()
        self.session: ClientSession | None = None

    async def on_message(self, message: Any) -> None:
        root = getattr(message, "root", None)
        if isinstance(root, types.ResourceUpdatedNotification):
            meta = root.params.meta  # v1 models a notification's _meta (extra fields allowed)
            self._hear(str(root.params.uri), meta.model_dump() if meta else {})

    async def connect(self, cmd: dict[str, Any]) -> dict[str, Any]:
        if cmd.get("version"):
            types.LATEST_PROTOCOL_VERSION = cmd["version"]
        if cmd["transport"] == "stdio":
            params = StdioServerParameters(
                command=cmd["command"], args=cmd["args"], env=cmd.get("env")
            )
            read, write = await self.stack.enter_async_context(stdio_client(params))
        else:
            read, write, _ = await self.stack.enter_async_context(
                streamable_http_client(cmd["url"])
            )
        self.session = await self.stack.enter_async_context(
            ClientSession(read, write, message_handler=self.on_message)
        )
        initialized = await self.session.initialize()
        capabilities = initialized.capabilities.model_dump(by_alias=True, exclude_none=True)
        return {
            "negotiated": initialized.protocolVersion,
            "extensions": capabilities.get("extensions"),
            "experimental": capabilities.get("experimental"),
        }

    async def list(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.session is not None
        tools = (await self.session.list_tools()).tools
        return {
            "tools": [
                {"name": t.name, "outputSchema": t.outputSchema, "meta": t.meta or {}}
                for t in tools
            ]
        }

    async def call(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.session is not None
        result = await self.session.call_tool(cmd["name"], cmd["arguments"], meta=cmd.get("meta"))
        return {
            "isError": bool(result.isError),
            "text": "".join(b.text for b in result.content if isinstance(b, types.TextContent)),
            "structuredContent": result.structuredContent,
            "meta": result.meta or {},
        }

    async def subscribe(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.session is not None
        await self.session.subscribe_resource(AnyUrl(cmd["uri"]))
        return {}

    async def read(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.session is not None
        (content, *_) = (await self.session.read_resource(AnyUrl(cmd["uri"]))).contents
        assert isinstance(content, types.TextResourceContents)
        return {"mimeType": content.mimeType, "text": content.text}

    async def close(self, cmd: dict[str, Any]) -> dict[str, Any]:
        await self.stack.aclose()
        self.session = None
        return {}


async def main() -> None:
    await serve_lines(Host())


if __name__ == "__main__":
    anyio.run(main)
