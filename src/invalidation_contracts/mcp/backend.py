"""The MCP server's backend, what it answers from: a provider, or a worker (``ContractWorker``).

``ContractBackend`` is the slice of ``server.http.ContractService`` the tool server needs (state to
answer from, the domain route handler, the signer), so a service shared with an HTTP app serves
MCP clients too, catching up with other workers as it does for HTTP. ``ProviderBackend`` gives the
same slice for a bare ``Provider`` (one process, no FastAPI).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from ..protocol.signing import Binding
from ..server.asked import PLAIN, Asked
from ..server.domain import Route
from ..server.provider import Outcome, Provider
from ..server.state import RegistryState


class Signer(Protocol):
    def sign(
        self, body: Mapping[str, Any], since: int | None, binding: Binding | None = None
    ) -> str: ...


class ContractBackend(Protocol):
    """A provider with the state it answers from (``ContractService`` is one)."""

    @property
    def provider(self) -> Provider: ...

    @property
    def signer(self) -> Signer | None: ...

    @property
    def available(self) -> bool: ...

    def state(self, since: int | None = None, epoch: str | None = None) -> RegistryState:
        """The state to answer a client at ``since``/``epoch`` from; may read a store.

        A backend may also have ``behind(since, epoch) -> bool`` (no I/O: whether ``state``
        would catch up, reading a store): where it says False, contract reads are answered in
        the event loop rather than a worker thread (``ContractService`` has it)."""
        ...

    def handle(self, route: Route[Any], payload: object, asked: Asked = PLAIN) -> Outcome:
        """Answer one domain request (may do I/O: a route's success handler)."""
        ...


class ProviderBackend:
    """A bare ``Provider`` as a ``ContractBackend``: its registry's current state, no signer."""

    def __init__(self, provider: Provider) -> None:
        self._provider = provider
        self.handle = provider.handle
        """Domain requests are the provider's to answer (``Provider.handle``)."""

    @property
    def provider(self) -> Provider:
        return self._provider

    @property
    def signer(self) -> Signer | None:
        return None

    @property
    def available(self) -> bool:
        return True

    def behind(self, since: int | None, epoch: str | None) -> bool:
        """Never: a bare provider's registry is the only one, in memory."""
        return False

    def state(self, since: int | None = None, epoch: str | None = None) -> RegistryState:
        return self._provider.registry.state


def as_backend(backend: Provider | ContractBackend) -> ContractBackend:
    """``backend`` as a ``ContractBackend`` (a ``Provider`` is wrapped)."""
    return ProviderBackend(backend) if isinstance(backend, Provider) else backend
