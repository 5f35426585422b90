"""A tiny MCP server that speaks no contract (the SDK's ``MCPServer``), run over stdio.

The proxy tests front it to see what is passed through unchanged, and to make the upstream fail:
``die`` ends the process mid-call, ``hang`` never answers, ``garbage`` writes a line that is not
JSON-RPC on stdout, and ``big`` answers ``size`` bytes of text; ``touch`` sends progress and
notifications.
"""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import Context, MCPServer

app = MCPServer("plain")


@app.tool()
def echo(text: str) -> str:
    """Say ``text`` back."""
    return text


@app.tool()
def pid() -> int:
    """This server's process id (a new one after the proxy reconnects)."""
    return os.getpid()


@app.tool()
def die() -> str:
    """End this process without answering."""
    sys.stdout.flush()
    os._exit(1)


@app.tool()
def hang() -> str:
    """Never answer (within any test's patience)."""
    time.sleep(3600)
    return "late"


@app.tool()
def garbage() -> str:
    """Write a line that is not JSON-RPC where the answer should be, then answer."""
    sys.stdout.write("this is not JSON-RPC\n")
    sys.stdout.flush()
    return "after the garbage"


@app.tool()
def big(size: int) -> str:
    """``size`` bytes of text."""
    return "x" * size


@app.tool()
async def touch(ctx: Context) -> str:
    """Tell the client its tools list and the greeting changed, and report progress."""
    await ctx.report_progress(1, 2, "half way")
    await ctx.notify_resource_updated("plain://greeting")
    await ctx.notify_tools_changed()
    return "touched"


@app.resource("plain://greeting")
def greeting() -> str:
    """A resource to read through the proxy."""
    return "hello from plain"


@app.prompt()
def ask(topic: str) -> str:
    """A prompt to get through the proxy."""
    return f"Tell me about {topic}."


if __name__ == "__main__":
    app.run()
