"""The provider's trust options (DESIGN.md §6): signed freshness and opaque names, each opt-in."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .opaque import OpaqueNames
from .signing import DEFAULT_STAMP_TTL_S, StampSigner

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


@dataclass(frozen=True, slots=True)
class TrustOptions:
    """What ``create_app(..., trust=...)`` turns on; the defaults turn nothing on.

    ``signing_keys`` (kid → Ed25519 private key) and ``active_kid``: sign every response whose
    request carries ``Contract-Sign: 1``, valid ``stamp_ttl_s`` seconds. ``opaque_key``: a
    server secret (≥ 16 bytes) that replaces table names, row keys and relations on the
    contract routes by keyed tags.
    """

    signing_keys: Mapping[str, Ed25519PrivateKey] = field(default_factory=dict)
    active_kid: str | None = None
    stamp_ttl_s: int = DEFAULT_STAMP_TTL_S
    opaque_key: bytes | None = None
    clock: Callable[[], float] = time.time

    def signer(self) -> StampSigner | None:
        """The stamp signer, or None when signing is off."""
        if not self.signing_keys:
            return None
        return StampSigner(
            self.signing_keys, active=self.active_kid, ttl_s=self.stamp_ttl_s, clock=self.clock
        )

    def opaque(self) -> OpaqueNames | None:
        """The name tagger, or None when names are sent as they are."""
        return OpaqueNames(self.opaque_key) if self.opaque_key is not None else None
