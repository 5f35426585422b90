"""What the two Python MCP hosts share (``mcp_host.py`` on SDK v2, ``mcp_host_v1.py`` on v1): the
stdin/stdout command loop and the commands that do not touch the SDK.

Imports nothing but anyio and the standard library, so each host's own environment runs it; the
host scripts import it from beside them (a script's folder is first on its path).
"""

from __future__ import annotations

import json
import sys
from typing import Any
from urllib.parse import urlencode

import anyio

#: The command names on stdin, and the host method each calls.
OPS = {
    "connect": "connect",
    "list": "list",
    "call": "call",
    "subscribe": "subscribe",
    "updates": "updates_of",
    "read": "read",
    "poll": "poll",
    "close": "close",
}


class Heard:
    """The notifications a host heard, and the commands that read them (and ``contract://``)."""

    def __init__(self) -> None:
        self.updates: list[str] = []
        self.notes: list[dict[str, Any]] = []
        self.heard = anyio.Event()

    def _hear(self, uri: str, meta: dict[str, Any] | None = None) -> None:
        self.updates.append(uri)
        self.notes.append({"uri": uri, "meta": meta or {}})
        self.heard.set()

    async def read(self, cmd: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    async def updates_of(self, cmd: dict[str, Any]) -> dict[str, Any]:
        with anyio.move_on_after(cmd["timeout_ms"] / 1000):
            while cmd["uri"] not in self.updates:
                self.heard = anyio.Event()
                await self.heard.wait()
        heard, self.updates = self.updates, []
        notes, self.notes = self.notes, []
        return {"updates": heard, "notes": notes}

    async def poll(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """The events mode: read ``contract://events`` after ``cursor``, the page parsed."""
        query = urlencode({k: cmd[k] for k in ("cursor", "limit") if cmd.get(k)})
        read = await self.read({"uri": "contract://events" + (f"?{query}" if query else "")})
        return {"mimeType": read["mimeType"], "page": json.loads(read["text"])}


async def serve_lines(host: Any) -> None:
    """Answer each command line on stdin with one JSON line on stdout until stdin ends; then
    close the host."""
    while line := await anyio.to_thread.run_sync(sys.stdin.readline):
        try:
            cmd = json.loads(line)
            answer = {"ok": True, **(await getattr(host, OPS[cmd["op"]])(cmd))}
        except Exception as exc:  # noqa: BLE001 - the driver reads the error
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
        sys.stdout.write(json.dumps(answer, default=str) + "\n")
        sys.stdout.flush()
    await host.close({})
