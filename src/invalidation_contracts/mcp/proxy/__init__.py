"""The fix memory as a local MCP proxy: any MCP host gets it by configuration alone.

``invalidation-contracts mcp-proxy`` serves the host (stdio, or streamable HTTP on loopback) in
front of one upstream MCP server (a command it spawns, or a URL) and keeps one fix memory for
it. Split by job: ``target`` (the upstream and its memory file), ``link`` (the connection, its
confirmation, faults and reconnection), ``host`` (the host-facing handlers), ``view`` (what the
host is shown), ``notify`` (the upstream's notifications passed on), ``run`` (opening the memory
and serving). docs/hosts.md has each host's configuration.
"""

from .host import PROXY_NAME, ProxyHandlers, proxy_server
from .link import LinkOptions, UpstreamLink
from .run import MemoryUnavailable, open_memory, serve_proxy
from .target import UpstreamTarget

__all__ = [
    "PROXY_NAME",
    "LinkOptions",
    "MemoryUnavailable",
    "ProxyHandlers",
    "UpstreamLink",
    "UpstreamTarget",
    "open_memory",
    "proxy_server",
    "serve_proxy",
]
