"""The contract over the Model Context Protocol (the ``mcp`` extra).

Server side: ``contract_server`` turns a provider into an MCP tool server (one tool per route, the
contract routes as resources, ``resources/updated`` when a table or the rules move). Client side:
``ContractSession`` wraps the SDK's ``ClientSession`` so every tool result feeds a ``FixMemory``
(origin: the server's identity; operation: the tool name) and the memory's needs are read from
the contract resources; ``connect`` opens one. ``names`` holds the URIs and ``_meta`` keys both
ends agree on.
"""

from importlib import import_module

from .._extras import missing

# The package's one guard: each of its modules imports mcp freely after it.
try:
    import_module("mcp")
except ModuleNotFoundError as exc:
    raise missing(exc, "mcp") from exc

from . import names
from .backend import ContractBackend, ProviderBackend
from .options import SessionOptions
from .reply import ToolReply
from .server import contract_server, run_stdio
from .session import ContractSession, connect

__all__ = [
    "ContractBackend",
    "ContractSession",
    "ProviderBackend",
    "SessionOptions",
    "ToolReply",
    "connect",
    "contract_server",
    "names",
    "run_stdio",
]
