"""httpx integration (the ``httpx`` extra): transports that feed every response to a fix memory.

An existing agent gains the contract by wrapping its client's transport::

    from invalidation_contracts.httpx import ContractTransport, INJECTED_EXTENSION

    client = httpx.Client(transport=ContractTransport(memory), base_url="https://api.example")

or by building the client here (``contract_client``, ``async_contract_client``). The package is
the edge beside the other integrations (``langchain``, ``pydantic_ai``, ``openai_agents``,
``mcp``); the memory it feeds is the sans-IO core in ``client``. Its rooms: ``transport`` (the
sync and async transports and clients), ``exchange`` (what the two share, written once as steps),
``extensions`` (what a request tells the transports), ``bounded`` (bounded decoding of a body a
server controls; the depth bound is ``client.limits.parse_json``), ``discovery`` (where each
origin's contract routes live) and ``watch`` (the watch stream's requests, thread and task; what
it decides is the sans-IO ``client.push``).
"""

from importlib import import_module

from .._extras import missing

# The package's one guard: each of its modules imports httpx freely after it.
try:
    import_module("httpx")
except ModuleNotFoundError as exc:
    raise missing(exc, "httpx") from exc

from ..client.push import WatchOptions
from .extensions import (
    EPISODE_EXTENSION,
    INJECTED_EXTENSION,
    LISTENER_EXTENSION,
    OPERATION_EXTENSION,
    REFUSED_EXTENSION,
    WIRE_COST_EXTENSION,
    Listener,
    default_origin,
    operation_of,
)
from .transport import (
    AsyncContractTransport,
    ContractTransport,
    async_contract_client,
    contract_client,
)
from .watch import Watches, watches

__all__ = [
    "AsyncContractTransport",
    "ContractTransport",
    "EPISODE_EXTENSION",
    "INJECTED_EXTENSION",
    "LISTENER_EXTENSION",
    "Listener",
    "OPERATION_EXTENSION",
    "REFUSED_EXTENSION",
    "WIRE_COST_EXTENSION",
    "WatchOptions",
    "Watches",
    "async_contract_client",
    "contract_client",
    "default_origin",
    "operation_of",
    "watches",
]
