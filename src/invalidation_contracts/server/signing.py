"""Server side of signed freshness: a key ring that signs response bodies, and its ASGI adapter.

``StampSigner`` is sans-IO: given a JSON body and the ``Contract-Since`` it answers, it returns
the detached JWS of its freshness statement (``protocol.signing``). ``SigningMiddleware`` is the
thin edge: for a request carrying ``Contract-Sign: 1`` it buffers the JSON response, signs the
exact bytes sent and adds ``Contract-Signature``. Other requests pass through untouched.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..protocol.headers import is_json_media_type
from ..protocol.signing import CONTRACT_SIGN, CONTRACT_SIGNATURE, Binding, ed25519, sign

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_STAMP_TTL_S = 300
_SIGN = CONTRACT_SIGN.lower().encode("latin-1")
_SIGNATURE = CONTRACT_SIGNATURE.lower().encode("latin-1")
_SINCE = b"contract-since"
_CONTENT_TYPE = b"content-type"

logger = logging.getLogger(__name__)


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


class SigningMiddleware:
    """ASGI middleware: sign JSON responses of requests that ask with ``Contract-Sign: 1``."""

    def __init__(self, app: ASGIApp, signer: StampSigner) -> None:
        self.app = app
        self.signer = signer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (_header(scope["headers"], _SIGN) or b"").strip() != b"1":
            await self.app(scope, receive, send)
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body" or start is None:
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            content = b"".join(chunks)
            headers = list(start.get("headers", []))
            signature = self._signature(headers, content, _binding(scope))
            if signature is not None:
                headers.append((_SIGNATURE, signature.encode("ascii")))
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": content, "more_body": False})

        await self.app(scope, receive, capture)

    def _signature(
        self, headers: list[tuple[bytes, bytes]], content: bytes, binding: Binding
    ) -> str | None:
        if not is_json_media_type(_header(headers, _CONTENT_TYPE)):
            return None
        since_raw = _header(headers, _SINCE)
        since = int(since_raw) if since_raw is not None and since_raw.isdigit() else None
        try:
            body = json.loads(content)
            if not isinstance(body, dict):
                return None
            return self.signer.sign(body, since, binding)
        except ValueError as exc:
            logger.warning("response left unsigned: %s", exc)
            return None


def _binding(scope: Scope) -> Binding:
    """The request a response answers, as its statement binds it: ``METHOD /path`` and the
    ``Host`` it was sent to."""
    host = _header(scope.get("headers", []), b"host")
    return Binding(
        req=f"{scope.get('method', 'GET')} {scope.get('path', '/')}",
        aud=host.decode("latin-1") if host else None,
    )


def _header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None
