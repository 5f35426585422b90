"""The ASGI adapter of signed freshness: for a request carrying ``Contract-Sign: 1`` it buffers
the JSON response, signs the exact bytes sent (``server.signing.StampSigner``) and adds
``Contract-Signature``. Other requests pass through untouched.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ...protocol.headers import is_json_media_type
from ...protocol.signing import CONTRACT_SIGN, CONTRACT_SIGNATURE, Binding

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from ..signing import StampSigner

_SIGN = CONTRACT_SIGN.lower().encode("latin-1")
_SIGNATURE = CONTRACT_SIGNATURE.lower().encode("latin-1")
_SINCE = b"contract-since"
_CONTENT_TYPE = b"content-type"

logger = logging.getLogger("invalidation_contracts.server.signing")


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
