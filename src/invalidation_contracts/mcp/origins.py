"""The origin an MCP server's fixes are filed under: the transport target, not the server's name.

A server chooses its ``serverInfo.name``; two different servers (another deployment, another
database, someone else's server) may choose the same one, and fixes keyed by it would be served
across them — and one server's contract would evict the other's memory (a new epoch resyncs it).
So ``connect`` binds the origin to what the client actually talks to:

- a URL (streamable HTTP): ``mcp+`` + the URL without its query or fragment, e.g.
  ``mcp+http://127.0.0.1:8765/mcp``;
- a stdio server: ``mcp+stdio:`` + the command line, quoted as a shell would
  (``mcp+stdio:acme-mcp --db /srv/acme.sqlite``), plus `` (in DIR)`` when a working directory is
  given, since relative paths in the arguments depend on it.

A server object run in process keeps ``mcp://`` + its name (one process, one object). The caller
may always name the origin itself (``origin=``), e.g. to share one memory between a stdio and an
HTTP connection to the same server.
"""

from __future__ import annotations

import shlex

from mcp import StdioServerParameters

#: The origin prefix of a server known only by the name it gives (in process, or no target).
NAMED = "mcp://"

#: ``origin=BY_SERVER_NAME``: file the fixes under ``mcp://`` + the server's ``serverInfo`` name,
#: chosen on purpose (a server run in process); two servers that give one name share it.
BY_SERVER_NAME = NAMED


def target_origin(server: object) -> str | None:
    """The origin of a ``connect`` target, or None when the target does not identify the server."""
    if isinstance(server, str):
        url = server.split("#", 1)[0].split("?", 1)[0]
        return f"mcp+{url}" if url else None
    if isinstance(server, StdioServerParameters):
        line = shlex.join([server.command, *server.args])
        cwd = f" (in {server.cwd})" if server.cwd is not None else ""
        return f"mcp+stdio:{line}{cwd}"
    return None


def named_origin(name: str) -> str:
    """The origin of a server known only by its ``serverInfo.name``."""
    return f"{NAMED}{name}"
