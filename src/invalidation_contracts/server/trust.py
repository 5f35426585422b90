"""The provider's trust options (SPEC §10): signed freshness and opaque names, each opt-in."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .opaque import OpaqueNames
from .signing import DEFAULT_STAMP_TTL_S, StampSigner

logger = logging.getLogger("invalidation_contracts.server")

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

    @classmethod
    def from_files(
        cls, signing_keys: tuple[str, ...] = (), opaque_key_env: str | None = None
    ) -> TrustOptions | None:
        """Options from PEM key files (the last one signs; kid = file stem) and an environment
        variable holding the opaque-names secret; None when neither is given.

        What ``serve`` builds in every worker process. Raises ``ValueError`` naming the file or
        variable that is unusable.
        """
        import os
        from pathlib import Path

        from ..private_files import exposure

        keys: dict[str, Ed25519PrivateKey] = {}
        if signing_keys:
            from cryptography.hazmat.primitives.serialization import load_pem_private_key

            for path in map(Path, signing_keys):
                exposed = exposure(path)
                if exposed is not None:
                    logger.warning("signing key %s", exposed)
                try:
                    key = load_pem_private_key(path.read_bytes(), password=None)
                except (OSError, ValueError, TypeError) as exc:
                    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                    raise ValueError(f"cannot read signing key {path}: {reason}") from None
                if not isinstance(key, _ed25519_key_type()):
                    raise ValueError(f"{path} is not an Ed25519 private key")
                keys[path.stem] = key
        opaque = None
        if opaque_key_env:
            secret = os.environ.get(opaque_key_env, "")
            if len(secret.encode()) < 16:
                raise ValueError(f"${opaque_key_env} must hold a secret of at least 16 bytes")
            opaque = secret.encode()
        if not keys and opaque is None:
            return None
        active = Path(signing_keys[-1]).stem if keys else None
        return cls(signing_keys=keys, active_kid=active, opaque_key=opaque)


def _ed25519_key_type() -> type[Ed25519PrivateKey]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey
