"""The HTTP binding's header names and its "is this JSON?" check, defined once for both ends.

``Contract-Since`` / ``Contract-Epoch`` carry a client's position (SPEC §3.1), ``Contract-Sign``
asks for a signed freshness statement and ``Contract-Signature`` carries it (SPEC §10.1). Only
JSON bodies carry the contract: ``application/json`` or a structured-syntax ``application/*+json``
(RFC 6839), whatever the parameters and case.
"""

from __future__ import annotations

from .signing import CONTRACT_SIGN, CONTRACT_SIGNATURE

CONTRACT_SINCE = "Contract-Since"
CONTRACT_EPOCH = "Contract-Epoch"
#: On a domain route's answer: the request fields a client may patch (SPEC §10.4).
CONTRACT_PATCHABLE = "Contract-Patchable"

__all__ = [
    "CONTRACT_EPOCH",
    "CONTRACT_PATCHABLE",
    "CONTRACT_SIGN",
    "CONTRACT_SIGNATURE",
    "CONTRACT_SINCE",
    "is_json_media_type",
    "position_headers",
]


def position_headers(seq: int | None, epoch: str | None) -> dict[str, str]:
    """A client's position as request headers: ``Contract-Since`` (and ``Contract-Epoch``);
    none without a seq."""
    if seq is None:
        return {}
    return {CONTRACT_SINCE: str(seq), **({CONTRACT_EPOCH: epoch} if epoch else {})}


def is_json_media_type(content_type: str | bytes | None) -> bool:
    """Whether a ``Content-Type`` value names JSON: ``application/json`` or
    ``application/*+json`` (parameters and case ignored)."""
    if not content_type:
        return False
    text = content_type.decode("latin-1") if isinstance(content_type, bytes) else content_type
    media = text.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )
