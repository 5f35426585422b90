"""The client's trust policy (SPEC §10): how far the memory believes a server about itself.

The paper evaluated only an honest server (§6.5). Each defence here is opt-in and off by default,
and with every one off the memory behaves exactly as without a policy:

- ``public_keys`` / ``require_signatures``: ask for signed freshness statements and check them;
  a required signature that is missing, wrong, of an unknown kid or expired means the response's
  contract is ignored — no stamp read, no fix learned, no feed applied, no resync done.
- ``max_evictions_per_table`` within ``window_s``: a bound on evictions driven by version stamps
  alone. Past it, a moved table is revalidated through ``/contract/changes`` (touches restamp,
  changed rows evict) instead of evicted, so a server bumping versions cannot force re-derivation.
- ``default_max_age_s``: a freshness ceiling counted from when a fix was learned; restamps do
  not extend it, so a server that never bumps (or only touches) cannot pin a fix forever.
- ``guard_parameters``: a fix is kept and served only if every parameter it merges and every
  path its patch writes is one of the origin's patchable paths (``FixMemory.set_patchable``).
- ``allow_origin_wide``: whether a fix the server marks ``origin_wide`` (no scope: served to every
  request of its operation) is kept at all; kept ones stay under every bound above.

Sans-IO: pure decisions over what the memory already holds.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..protocol.models import Suggestion, field_pointer
from ..protocol.signing import Binding, SignatureError, load_public_key, verify
from .entries import MemoryEntry
from .patching import is_patchable, written_paths

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

DEFAULT_CLOCK_SKEW_S = 60.0
DEFAULT_WINDOW_S = 3600.0


@dataclass(frozen=True, slots=True)
class TrustPolicy:
    """What the memory checks before it lets a server's contract act on its entries.

    ``public_keys``: kid → Ed25519 public key (object, 32 raw bytes, base64url or PEM); several
    kids are accepted at once, which is how keys rotate. Keys need the ``signing`` extra
    (``cryptography``); without keys nothing imports it. With keys, the client asks for
    signatures (``Contract-Sign: 1``) and rejects a bad one; ``require_signatures`` also rejects
    an absent one. ``clock_skew_s``: tolerance on ``iat``/``exp``. A statement bound to another
    request than the one sent (``req``, ``aud``) is rejected; ``require_binding`` also rejects one
    that binds none (servers before 0.2.0 sign without a binding).
    """

    require_signatures: bool = False
    public_keys: Mapping[str, Any] = field(default_factory=dict)
    clock_skew_s: float = DEFAULT_CLOCK_SKEW_S
    max_evictions_per_table: int | None = None
    window_s: float = DEFAULT_WINDOW_S
    default_max_age_s: float | None = None
    guard_parameters: bool = False
    require_binding: bool = False
    allow_origin_wide: bool = True
    """Keep fixes the server marks ``origin_wide`` (served to every request of their operation);
    False refuses them. Either way an origin-wide fix passes every other check here."""

    def __post_init__(self) -> None:
        keys: dict[str, Ed25519PublicKey] = {}
        for kid, key in dict(self.public_keys).items():
            if not isinstance(kid, str) or not kid:
                raise ValueError("public key ids must be non-empty strings")
            keys[kid] = load_public_key(key)
        object.__setattr__(self, "public_keys", keys)
        if self.require_signatures and not keys:
            raise ValueError("require_signatures needs at least one public key")
        if self.clock_skew_s < 0:
            raise ValueError("clock_skew_s must not be negative")
        if self.max_evictions_per_table is not None and self.max_evictions_per_table < 1:
            raise ValueError("max_evictions_per_table must be at least 1")
        if self.window_s <= 0:
            raise ValueError("window_s must be positive")
        if self.default_max_age_s is not None and self.default_max_age_s < 0:
            raise ValueError("default_max_age_s must not be negative")

    # ------------------------------------------------------------------ signed freshness

    @property
    def requests_signatures(self) -> bool:
        """Whether the client sends ``Contract-Sign: 1``."""
        return bool(self.public_keys)

    def doubt(
        self,
        body: Mapping[str, Any],
        signature: str | None,
        *,
        since: int | None,
        now: float,
        binding: Binding | None = None,
    ) -> str | None:
        """Why a response's contract must not be acted on, or None when it may be (``binding``:
        the request it answers, when known)."""
        if not self.public_keys:
            return None
        if signature is None:
            return "the response is unsigned" if self.require_signatures else None
        try:
            verify(
                signature,
                body,
                self.public_keys,
                since=since,
                now=now,
                leeway_s=self.clock_skew_s,
                binding=binding,
                require_binding=self.require_binding,
            )
        except SignatureError as exc:
            return str(exc)
        return None

    # ------------------------------------------------------------------ freshness ceiling

    def expiry(self, entry: MemoryEntry, now: float) -> str | None:
        """Why ``entry`` is past its freshness ceiling, or None while it is within it.

        The suggestion's own ``max_age_s`` counts from the last revalidation; the client's
        ``default_max_age_s`` counts from when the fix was learned.
        """
        own = entry.suggestion.max_age_s
        if own is not None and now - entry.validated_at > own:
            return f"older than max_age_s={own}"
        ceiling = self.default_max_age_s
        if ceiling is not None and now - entry.provenance.stored_at > ceiling:
            return f"learned more than default_max_age_s={ceiling:g} ago"
        return None

    # ------------------------------------------------------------------ eviction-rate bound

    def recent(self, times: Sequence[float], now: float) -> list[float]:
        """The eviction times still inside the window, at most the bound's worth."""
        kept = [t for t in times if now - t < self.window_s]
        limit = self.max_evictions_per_table
        return kept[-limit:] if limit is not None else kept

    def bound_reached(self, times: Sequence[float], now: float) -> bool:
        """Whether a table's stamp-driven evictions have used up the window's allowance."""
        limit = self.max_evictions_per_table
        return limit is not None and len(self.recent(times, now)) >= limit

    # ------------------------------------------------------------------ parameter injection

    def injection(self, suggestion: Suggestion, patchable: Collection[str] | None) -> str | None:
        """Why a fix would change the request outside the patchable paths; None if it would not."""
        if patchable is None:
            return "the origin has published no patchable paths"
        outside = [
            path
            for path in dict.fromkeys(
                [field_pointer(name) for name in suggestion.parameters]
                + written_paths(suggestion.patch or ())
            )
            if not is_patchable(path, patchable)
        ]
        if outside:
            return f"changes fields outside the patchable paths: {', '.join(outside)}"
        return None
