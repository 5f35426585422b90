"""Opaque client keys: who sent a request, as a label that is never the raw credential.

A ``ClientKey`` turns an ASGI request into a short key: the client's address, a header's value, or
the bearer token — a header or token only as a keyed hash (HMAC-SHA-256 under a secret, 16 hex
digits), so a metrics scrape or the operator page never shows a credential. Give every worker the
same ``secret`` for keys that agree across workers; the default is a random one per process.
``ClientKeyMiddleware`` puts the key of the request in flight where the telemetry reads it
(``current_client``), for ``create_app``'s app and an existing app alike.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Send
    from starlette.types import Scope as ASGIScope

Scope = Mapping[str, Any]
UNKNOWN = "unknown"
CLIENT_KEY_SECRET_ENV = "INVALIDATION_CONTRACTS_CLIENT_KEY_SECRET"
"""The secret ``serve``'s workers hash client keys under (``serve --client-key-secret-file``)."""

_CLIENT: ContextVar[str | None] = ContextVar("invalidation_contracts_client", default=None)


def current_client() -> str:
    """The key of the client whose request is in flight (``unknown`` outside one)."""
    return _CLIENT.get() or UNKNOWN


class ClientKey:
    """How a request names its client (see the module docstring)."""

    def __init__(self, derive: Callable[[Scope], str | None], description: str) -> None:
        self._derive = derive
        self.description = description

    def __call__(self, scope: Scope) -> str:
        try:
            return self._derive(scope) or UNKNOWN
        except Exception:  # a malformed request is still served; it is just not attributed
            return UNKNOWN

    @classmethod
    def from_env(cls, variable: str = CLIENT_KEY_SECRET_ENV) -> ClientKey:
        """``bearer()`` under the secret in ``variable`` (UTF-8), else under a random one."""
        text = os.environ.get(variable, "")
        return cls.bearer(secret=text.encode("utf-8") if text else None)

    @classmethod
    def address(cls) -> ClientKey:
        """The peer's IP address (behind a proxy: the proxy's, unless the server rewrites it)."""
        return cls(lambda scope: (scope.get("client") or (None,))[0], "address")

    @classmethod
    def header(cls, name: str, *, secret: bytes | None = None) -> ClientKey:
        """A keyed hash of header ``name`` (absent: ``unknown``)."""
        wanted = name.lower().encode("latin-1")
        key = secret if secret is not None else secrets.token_bytes(32)

        def derive(scope: Scope) -> str | None:
            value = _header(scope, wanted)
            return None if value is None else _digest(key, value)

        return cls(derive, f"header {name} (hashed)")

    @classmethod
    def bearer(cls, *, secret: bytes | None = None, fallback: ClientKey | None = None) -> ClientKey:
        """A keyed hash of the bearer token; without one, ``fallback`` (default: the address)."""
        key = secret if secret is not None else secrets.token_bytes(32)
        other = fallback if fallback is not None else cls.address()

        def derive(scope: Scope) -> str | None:
            value = _header(scope, b"authorization")
            if value is not None and value[:7].lower() == b"bearer " and value[7:].strip():
                return "token:" + _digest(key, value[7:].strip())
            return other(scope)

        return cls(derive, "bearer token (hashed), else address")


def _header(scope: Scope, name: bytes) -> bytes | None:
    """The value of header ``name`` (lowercase), as ASGI servers give them: names lowercased
    (the ASGI spec; Starlette's ``Headers`` relies on it too)."""
    for key, value in scope.get("headers") or ():
        if key == name:
            return bytes(value)
    return None


def _digest(secret: bytes, value: bytes) -> str:
    return hmac.new(secret, value, hashlib.sha256).hexdigest()[:16]


class ClientKeyMiddleware:
    """Pure ASGI middleware: each HTTP request runs with its client key in ``current_client``."""

    def __init__(self, app: ASGIApp, key: ClientKey | None = None) -> None:
        self.app = app
        self.key = key if key is not None else ClientKey.bearer()

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        token = _CLIENT.set(self.key(scope))
        try:
            await self.app(scope, receive, send)
        finally:
            _CLIENT.reset(token)
