"""The patchable fields a server publishes over HTTP, given to the memory (SPEC §10.4).

A domain route's response carries ``Contract-Patchable``: the request fields a client may patch
from a cached fix, the union over the server's routes (one allowlist per origin, as the memory
keeps it and as MCP tools publish it). The first such header of an origin sets the memory's
allowlist when it has none, so client apply mode works without ``set_patchable`` by hand; an
allowlist the agent set itself is never replaced (the server does not get to widen it), and
under ``TrustPolicy(guard_parameters=True)`` nothing is adopted: the guard's allowlist is the
agent's to give (threat model T10), not the server's to claim. A header
over ``MAX_FIELDS`` names or ``MAX_BYTES`` bytes, or naming something that is not a field, is
ignored. Store I/O happens once per origin and transport.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ..protocol.headers import CONTRACT_PATCHABLE
from .memory import FixMemory

MAX_FIELDS = 256
MAX_BYTES = 8192

logger = logging.getLogger("invalidation_contracts.client")


def parse_patchable(value: str | None) -> list[str] | None:
    """The field names a ``Contract-Patchable`` value lists; None when absent or out of bounds."""
    if value is None or len(value) > MAX_BYTES:
        return None
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names or len(names) > MAX_FIELDS:
        return None
    if not all(name.isascii() and name.isprintable() and " " not in name for name in names):
        return None
    return sorted(set(names))


class PublishedPatchable:
    """Per transport: which origins' allowlists were already looked at."""

    def __init__(self, memory: FixMemory) -> None:
        self.memory = memory
        self._seen: set[str] = set()

    def learn(self, origin: str, headers: Mapping[str, str]) -> None:
        """Give ``origin``'s published allowlist to the memory, once, unless it has one."""
        if origin in self._seen or self.memory.trust.guard_parameters:
            return
        fields = parse_patchable(headers.get(CONTRACT_PATCHABLE))
        if fields is None:
            return
        self._seen.add(origin)
        try:
            if self.memory.state(origin).patchable is None:
                self.memory.set_patchable(origin, fields)
        except (ValueError, OSError) as exc:  # a name the allowlist refuses, a failing store
            logger.warning("%s: published patchable fields not kept: %s", origin, exc)
