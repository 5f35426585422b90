"""A plain MCP host on the official Python SDK (no contract code), driven line by line.

The Python twin of ``node/mcp_host.mjs``: the same commands on stdin, the same answers on stdout
(one JSON object a line), so one conformance suite drives both SDKs. ``version`` is ``legacy``
(the ``initialize`` handshake at the SDK's latest handshake revision) or ``auto`` (the SDK's
default: a ``server/discover`` probe, then 2026-07-28's per-request envelope). Notifications:
``resources/subscribe`` on a handshake connection, a ``subscriptions/listen`` stream on a modern
one.

usage: python mcp_host.py
"""

from __future__ import annotations

import warnings
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.subscriptions import listen
from mcp_host_lines import Heard, serve_lines
from mcp_types.version import MODERN_PROTOCOL_VERSIONS


class Host(Heard):
    """One client, the notifications it heard, and the commands over it."""

    def __init__(self, tasks: anyio.abc.TaskGroup) -> None:
        super().__init__()
        self.tasks = tasks
        self.client: Client | None = None
        self._closing: anyio.Event | None = None

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self._hear(str(message.params.uri), message.params.meta)

    async def connect(self, cmd: dict[str, Any]) -> dict[str, Any]:
        if cmd["transport"] == "stdio":
            target: Any = StdioServerParameters(
                command=cmd["command"], args=cmd["args"], env=cmd.get("env")
            )
        else:
            target = cmd["url"]
        mode = cmd.get("version") or "auto"
        ready = anyio.Event()
        self._closing = anyio.Event()
        self.tasks.start_soon(
            self._hold, Client(target, mode=mode, message_handler=self.on_message), ready
        )
        await ready.wait()
        assert self.client is not None
        session = self.client.session
        caps = session.server_capabilities
        return {
            "negotiated": session.protocol_version,
            "extensions": caps.extensions if caps is not None else None,
            "experimental": caps.experimental if caps is not None else None,
        }

    async def _hold(self, client: Client, ready: anyio.Event) -> None:
        async with client:
            self.client = client
            ready.set()
            assert self._closing is not None
            await self._closing.wait()

    async def list(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.client is not None
        tools = (await self.client.list_tools()).tools
        return {
            "tools": [
                {"name": t.name, "outputSchema": t.output_schema, "meta": t.meta or {}}
                for t in tools
            ]
        }

    async def call(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.client is not None
        result = await self.client.call_tool(cmd["name"], cmd["arguments"], meta=cmd.get("meta"))
        return {
            "isError": bool(result.is_error),
            "text": "".join(b.text for b in result.content if isinstance(b, types.TextContent)),
            "structuredContent": result.structured_content,
            "meta": result.meta or {},
        }

    async def subscribe(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.client is not None
        session = self.client.session
        if session.protocol_version in MODERN_PROTOCOL_VERSIONS:
            subscribed = anyio.Event()
            self.tasks.start_soon(self._listen, cmd["uri"], subscribed)
            await subscribed.wait()
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # deprecated at 2026-07-28, the way before it
                await session.subscribe_resource(cmd["uri"])
        return {}

    async def _listen(self, uri: str, subscribed: anyio.Event) -> None:
        assert self.client is not None
        async with listen(self.client.session, resource_subscriptions=[uri]) as events:
            subscribed.set()
            async for event in events:
                if getattr(event, "uri", None) is not None:
                    self._hear(str(event.uri))

    async def read(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.client is not None
        (content, *_) = (await self.client.read_resource(cmd["uri"])).contents
        assert isinstance(content, types.TextResourceContents)
        return {"mimeType": content.mime_type, "text": content.text}

    async def close(self, cmd: dict[str, Any]) -> dict[str, Any]:
        if self._closing is not None:
            self._closing.set()
        return {}


async def main() -> None:
    async with anyio.create_task_group() as tasks:
        await serve_lines(Host(tasks))
        tasks.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main)
