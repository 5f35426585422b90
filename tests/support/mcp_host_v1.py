"""A plain MCP host on the official Python SDK v1 (``mcp`` 1.x, no contract code), driven line by
line.

The v1 twin of ``mcp_host.py`` and ``node/mcp_host.mjs``: the same commands on stdin, the same
answers on stdout (one JSON object a line). v1 and v2 share the import name ``mcp``, so this
script runs in its own virtual environment (``mcp_hosts.v1_python``) and imports nothing of the
project. ``version`` is the revision the host offers in ``initialize`` (the SDK offers its latest
otherwise: ``ClientSession.initialize`` reads ``mcp.types.LATEST_PROTOCOL_VERSION``, which the
connect sets, as a host pinned to an older revision would be); notifications come by
``resources/subscribe`` (v1 speaks no ``server/discover`` era).

usage: python mcp_host_v1.py   (with mcp 1.x importable)
"""

from __future__ import annotations

import json
import sys
from contextlib import AsyncExitStack
from typing import Any
from urllib.parse import urlencode

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from pydantic import AnyUrl


class Host:
    """One v1 ``ClientSession``, the notifications it heard, and the commands over it."""

    def __init__(self) -> None:
        self.stack = AsyncExitStack()
        self.session: ClientSession | None = None
        self.updates: list[str] = []
        self.notes: list[dict[str, Any]] = []
        self.heard = anyio.Event()

    async def on_message(self, message: Any) -> None:
        root = getattr(message, "root", None)
        if isinstance(root, types.ResourceUpdatedNotification):
            self.updates.append(str(root.params.uri))
            meta = root.params.meta  # v1 models a notification's _meta (extra fields allowed)
            self.notes.append(
                {"uri": str(root.params.uri), "meta": meta.model_dump() if meta else {}}
            )
            self.heard.set()

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

    async def updates_of(self, cmd: dict[str, Any]) -> dict[str, Any]:
        with anyio.move_on_after(cmd["timeout_ms"] / 1000):
            while cmd["uri"] not in self.updates:
                self.heard = anyio.Event()
                await self.heard.wait()
        heard, self.updates = self.updates, []
        notes, self.notes = self.notes, []
        return {"updates": heard, "notes": notes}

    async def read(self, cmd: dict[str, Any]) -> dict[str, Any]:
        assert self.session is not None
        (content, *_) = (await self.session.read_resource(AnyUrl(cmd["uri"]))).contents
        assert isinstance(content, types.TextResourceContents)
        return {"mimeType": content.mimeType, "text": content.text}

    async def poll(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """The events mode: read ``contract://events`` after ``cursor``, the page parsed."""
        query = urlencode({k: cmd[k] for k in ("cursor", "limit") if cmd.get(k)})
        read = await self.read({"uri": "contract://events" + (f"?{query}" if query else "")})
        return {"mimeType": read["mimeType"], "page": json.loads(read["text"])}

    async def close(self, cmd: dict[str, Any]) -> dict[str, Any]:
        await self.stack.aclose()
        self.session = None
        return {}


async def main() -> None:
    host = Host()
    ops = {
        "connect": host.connect,
        "list": host.list,
        "call": host.call,
        "subscribe": host.subscribe,
        "updates": host.updates_of,
        "read": host.read,
        "poll": host.poll,
        "close": host.close,
    }
    while line := await anyio.to_thread.run_sync(sys.stdin.readline):
        try:
            cmd = json.loads(line)
            answer = {"ok": True, **(await ops[cmd["op"]](cmd))}
        except Exception as exc:  # noqa: BLE001 - the driver reads the error
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
        sys.stdout.write(json.dumps(answer, default=str) + "\n")
        sys.stdout.flush()
    await host.close({})


if __name__ == "__main__":
    anyio.run(main)
