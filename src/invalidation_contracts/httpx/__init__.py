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

from .._extras import require_extra

require_extra("httpx", "httpx")

from ..client.push import WatchOptions  # noqa: E402
from .extensions import (  # noqa: E402
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
from .transport import (  # noqa: E402
    AsyncContractTransport,
    ContractTransport,
    async_contract_client,
    contract_client,
)
from .watch import Watches, watches  # noqa: E402

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
