"""Server side of signed freshness: a key ring that signs response bodies (sans-IO).

``StampSigner``: given a JSON body and the ``Contract-Since`` it answers, it returns the detached
JWS of its freshness statement (``protocol.signing``). Its ASGI adapter, ``SigningMiddleware``,
lives at the HTTP edge (``server.http.signing``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._deprecation import moved_names
from ..protocol.signing import Binding, ed25519, sign

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

DEFAULT_STAMP_TTL_S = 300

__getattr__ = moved_names(
    __name__, {"SigningMiddleware": "invalidation_contracts.server.http.signing"}
)


class StampSigner:
    """Signs freshness statements with the active key of a key ring.

    ``keys`` maps key ids to Ed25519 private keys; ``active`` names the one that signs (default:
    the only one). Rotation: publish the new kid's public key to clients, then make it active;
    clients accept every kid they are configured with, so old and new overlap. Each statement
    is valid for ``ttl_s`` seconds from issue.
    """

    def __init__(
        self,
        keys: Mapping[str, Ed25519PrivateKey],
        *,
        active: str | None = None,
        ttl_s: int = DEFAULT_STAMP_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not keys:
            raise ValueError("signing needs at least one key")
        private_key = ed25519().Ed25519PrivateKey
        for kid, key in keys.items():
            if not kid or not isinstance(key, private_key):
                raise ValueError(f"signing key {kid!r} must be an Ed25519 private key with a kid")
        if active is None:
            if len(keys) != 1:
                raise ValueError("several signing keys: name the active kid")
            active = next(iter(keys))
        if active not in keys:
            raise ValueError(f"active kid {active!r} is not among the signing keys")
        if ttl_s < 1:
            raise ValueError("stamp_ttl_s must be at least 1 second")
        self._keys = dict(keys)
        self.active = active
        self.ttl_s = int(ttl_s)
        self._clock = clock

    def public_keys(self) -> dict[str, Ed25519PublicKey]:
        """Every kid's public key: what clients are configured with."""
        return {kid: key.public_key() for kid, key in self._keys.items()}

    def sign(
        self, body: Mapping[str, Any], since: int | None, binding: Binding | None = None
    ) -> str:
        """The detached JWS for ``body`` (a JSON object) answered under ``since``, bound to the
        request ``binding`` names."""
        iat = math.floor(self._clock())
        return sign(
            body,
            self._keys[self.active],
            self.active,
            since=since,
            iat=iat,
            exp=iat + self.ttl_s,
            binding=binding,
        )
