"""Signed freshness statements: what a server signs about a response, as a detached JWS (RFC 7515).

A statement names the response's contract position (``contract_seq``, ``contract_epoch``,
``rules_version``), a digest of its ``table_versions`` and the ``Contract-Since`` those versions
are relative to, a digest of the rest of the body, and when it was issued and expires. The JWS is
sent in compact detached form (``header..signature``, RFC 7515 Appendix F): the payload is not
sent, because the verifier rebuilds it from the body it received. ``iat`` and ``exp`` travel in
the protected header (replicated claims, RFC 7519 §5.3), so the header alone completes it.

Since 0.9 the protected header also binds the request the statement answers: ``req`` (``METHOD
/path`` over HTTP, ``tools/call NAME`` over MCP) and ``aud`` (the ``Host`` the request was sent
to, over HTTP). A verifier that knows the request it sent refuses a statement bound to another
one; a statement without them (a server before 0.9) is accepted unless the verifier requires the
binding (``TrustPolicy(require_binding=True)``).

Pure functions over bytes and JSON values. Ed25519 (``alg: Ed25519``, RFC 9864; the deprecated
``EdDSA`` of RFC 8037 is still accepted) comes from ``cryptography``, imported only when a key is
used: the protocol and the client import without the ``signing`` extra.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeGuard, cast

from .._extras import require_extra
from .canonical import canonical_json, fingerprint
from .models import ContractFields

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

#: Request header: ask the server to sign the response (value ``1``).
CONTRACT_SIGN = "Contract-Sign"
#: Response header carrying the detached JWS.
CONTRACT_SIGNATURE = "Contract-Signature"
ALGORITHM = "Ed25519"
"""The ``alg`` a signer emits: the fully specified Ed25519 name of RFC 9864."""
ACCEPTED_ALGORITHMS = frozenset({ALGORITHM, "EdDSA"})
"""What a verifier accepts: ``Ed25519``, and ``EdDSA`` (RFC 8037, deprecated by RFC 9864) from
servers that predate it. With an Ed25519 key both name the same signature."""
TYPE = "contract-freshness+jws"
#: The body members named in the statement itself; every other member is in ``content``.
CONTRACT_MEMBERS = tuple(ContractFields.model_fields)
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")
#: Longest ``req``/``aud`` a header may carry (a server controls it: bounded on the client).
MAX_BINDING_CHARS = 2048


class SignatureError(ValueError):
    """A signature that is malformed, unknown, wrong, or outside its validity window."""


def ed25519() -> ModuleType:
    """``cryptography``'s Ed25519 module; ``MissingExtra`` naming ``signing`` without it."""
    require_extra("signing", "cryptography")
    from cryptography.hazmat.primitives.asymmetric import ed25519 as module

    return module


@dataclass(frozen=True, slots=True)
class SignedHeader:
    """The protected header of a freshness JWS."""

    kid: str
    iat: int
    exp: int
    alg: str = ALGORITHM
    req: str | None = None
    """The request answered: ``METHOD /path`` (HTTP) or ``tools/call NAME`` (MCP)."""
    aud: str | None = None
    """The ``Host`` the request was sent to (HTTP; None over MCP)."""

    def to_json(self) -> dict[str, Any]:
        header: dict[str, Any] = {
            "alg": self.alg,
            "typ": TYPE,
            "kid": self.kid,
            "iat": self.iat,
            "exp": self.exp,
        }
        if self.req is not None:
            header["req"] = self.req
        if self.aud is not None:
            header["aud"] = self.aud
        return header


@dataclass(frozen=True, slots=True)
class Binding:
    """The request a verifier sent, as a statement binds it (None: not known, not checked)."""

    req: str | None = None
    aud: str | None = None


def statement(body: Mapping[str, Any], *, since: int | None, iat: int, exp: int) -> dict[str, Any]:
    """The freshness statement of a JSON response ``body`` (``since``: the echoed Contract-Since).

    Raises ``ValueError`` when the body cannot be canonicalized (RFC 8785 I-JSON limits).
    """
    versions = body.get("table_versions")
    rest = {name: value for name, value in body.items() if name not in CONTRACT_MEMBERS}
    try:
        return {
            "contract_seq": body.get("contract_seq"),
            "contract_epoch": body.get("contract_epoch"),
            "rules_version": body.get("rules_version"),
            "table_versions": fingerprint(versions) if versions is not None else None,
            "since": since,
            "content": fingerprint(rest),
            "iat": iat,
            "exp": exp,
        }
    except (TypeError, ValueError) as exc:
        raise ValueError(f"the body cannot be canonicalized: {exc}") from exc


def sign(
    body: Mapping[str, Any],
    key: Ed25519PrivateKey,
    kid: str,
    *,
    since: int | None,
    iat: int,
    exp: int,
    binding: Binding | None = None,
) -> str:
    """The compact detached JWS (``header..signature``) of ``body``'s freshness statement,
    bound to the request ``binding`` names."""
    if not kid:
        raise ValueError("a signing key needs a non-empty kid")
    if exp <= iat:
        raise ValueError("a statement must expire after it is issued")
    bound = binding if binding is not None else Binding()
    signed = SignedHeader(kid, iat, exp, req=bound.req, aud=bound.aud)
    header = _b64(canonical_json(signed.to_json()))
    payload = _b64(canonical_json(statement(body, since=since, iat=iat, exp=exp)))
    signature = key.sign(f"{header}.{payload}".encode("ascii"))
    return f"{header}..{_b64(signature)}"


def read_header(jws: str) -> SignedHeader:
    """The protected header of a detached JWS; ``SignatureError`` if it is not one of ours."""
    header, _ = _split(jws)
    return _header(header)


def verify(
    jws: str,
    body: Mapping[str, Any],
    keys: Mapping[str, Ed25519PublicKey],
    *,
    since: int | None,
    now: float,
    leeway_s: float = 0.0,
    binding: Binding | None = None,
    require_binding: bool = False,
) -> SignedHeader:
    """Check ``jws`` against the ``body`` received, by ``kid`` in ``keys``, at time ``now``, and
    against the request ``binding`` names (what it leaves None is not checked).

    Returns the header; raises ``SignatureError`` saying why the statement is not acceptable.
    """
    encoded, signature = _split(jws)
    header = _header(encoded)
    key = keys.get(header.kid)
    if key is None:
        raise SignatureError(f"unknown key id {header.kid!r}")
    try:
        claims = statement(body, since=since, iat=header.iat, exp=header.exp)
    except ValueError as exc:
        raise SignatureError(str(exc)) from None
    payload = _b64(canonical_json(claims))
    ed25519()
    from cryptography.exceptions import InvalidSignature

    try:
        key.verify(signature, f"{encoded}.{payload}".encode("ascii"))
    except InvalidSignature:
        raise SignatureError(
            f"the signature by {header.kid!r} does not match this response"
        ) from None
    if now > header.exp + leeway_s:
        raise SignatureError(f"the statement expired at {header.exp} (now {int(now)})")
    if header.iat > now + leeway_s:
        raise SignatureError(
            f"the statement is issued in the future ({header.iat}, now {int(now)})"
        )
    _check_binding(header, binding if binding is not None else Binding(), require_binding)
    return header


def _check_binding(header: SignedHeader, sent: Binding, required: bool) -> None:
    """``SignatureError`` unless the statement answers the request sent."""
    if required and header.req is None:
        raise SignatureError("the statement binds no request (a server before 0.9?)")
    if header.req is not None and sent.req is not None and header.req != sent.req:
        raise SignatureError(
            f"the statement answers {header.req[:200]!r}, not the request sent {sent.req[:200]!r}"
        )
    if header.aud is not None and sent.aud is not None and header.aud.lower() != sent.aud.lower():
        raise SignatureError(
            f"the statement was issued for {header.aud[:200]!r}, not {sent.aud[:200]!r}"
        )


def load_public_key(value: Ed25519PublicKey | bytes | str) -> Ed25519PublicKey:
    """An Ed25519 public key from a key object, 32 raw bytes, base64url of them, or PEM text."""
    module = ed25519()
    from cryptography.hazmat.primitives import serialization

    public_key: type[Ed25519PublicKey] = module.Ed25519PublicKey
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("-----BEGIN"):
            key = serialization.load_pem_public_key(text.encode("ascii"))
            if not isinstance(key, public_key):
                raise ValueError("the PEM key is not an Ed25519 public key")
            return key
        raw = _unb64(text)
    elif isinstance(value, (bytes, bytearray)):
        raw = bytes(value)
    elif isinstance(value, public_key):
        return value
    else:
        raise ValueError(f"{type(value).__name__} is not an Ed25519 public key")
    if len(raw) != 32:
        raise ValueError(f"an Ed25519 public key is 32 bytes, not {len(raw)}")
    return public_key.from_public_bytes(raw)


def public_key_text(key: Ed25519PrivateKey | Ed25519PublicKey) -> str:
    """The base64url form of a key's raw public bytes (what ``load_public_key`` reads back)."""
    module = ed25519()
    from cryptography.hazmat.primitives import serialization

    private_key: type[Ed25519PrivateKey] = module.Ed25519PrivateKey
    public = key.public_key() if isinstance(key, private_key) else cast("Ed25519PublicKey", key)
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return _b64(raw)


def _split(jws: str) -> tuple[str, bytes]:
    parts = jws.strip().split(".") if isinstance(jws, str) else []
    if len(parts) != 3 or not parts[0] or parts[1] or not parts[2]:
        raise SignatureError("not a compact detached JWS (header..signature)")
    try:
        return parts[0], _unb64(parts[2])
    except ValueError:
        raise SignatureError("the signature is not base64url") from None


def _header(encoded: str) -> SignedHeader:
    try:
        data = json.loads(_unb64(encoded))
    except ValueError:
        raise SignatureError("the JWS header is not base64url JSON") from None
    if not isinstance(data, dict):
        raise SignatureError("the JWS header is not a JSON object")
    alg = data.get("alg")
    if alg not in ACCEPTED_ALGORITHMS:
        raise SignatureError(f"algorithm {alg!r} is not {ALGORITHM} (or the deprecated EdDSA)")
    if data.get("typ") != TYPE:
        raise SignatureError(f"type {data.get('typ')!r} is not {TYPE}")
    if data.get("crit") is not None:
        raise SignatureError("critical header parameters are not understood")
    kid, iat, exp = data.get("kid"), data.get("iat"), data.get("exp")
    if not isinstance(kid, str) or not kid:
        raise SignatureError("the JWS header has no kid")
    if not (_is_int(iat) and _is_int(exp)):
        raise SignatureError("the JWS header needs integer iat and exp")
    req, aud = data.get("req"), data.get("aud")
    for name, value in (("req", req), ("aud", aud)):
        if value is not None and not (
            isinstance(value, str) and 0 < len(value) <= MAX_BINDING_CHARS
        ):
            raise SignatureError(f"the JWS header's {name} is not a string of a bounded length")
    return SignedHeader(kid, iat, exp, str(alg), req=req, aud=aud)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if not _BASE64URL.fullmatch(text):
        raise ValueError("not base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"not base64url: {exc}") from None
