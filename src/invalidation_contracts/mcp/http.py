"""The streamable HTTP app of a contract server, safe on any bind address.

- **Host and Origin are checked on every bind address** (DNS-rebinding protection): the
  loopback names when bound to loopback, the bound address itself otherwise, plus an allow-list
  (``allowed_hosts``, ``allowed_origins``). A wildcard bind (``0.0.0.0``, ``::``) accepts only
  the allow-list, so it needs one. A foreign ``Host`` is 421, a foreign ``Origin`` 403 (the SDK's
  check).
- **A bearer token is required off loopback**: the admin token's mechanism (``Authorization:
  Bearer <token>``, compared in constant time; 401 with ``WWW-Authenticate`` otherwise). On
  loopback it is optional.
- **Idle sessions are reaped** after ``idle_timeout_s``, and at most ``max_sessions`` are held.
- **A stalled body is cut off**: reading a request body that stalls longer than
  ``body_timeout_s`` between chunks answers 408.
- **A stalled request head is cut off** (by the listener, ``header_timeout``): a connection that
  has not sent a request's line and headers ``header_timeout_s`` after it opened is closed.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.transport_security import TransportSecuritySettings

from ..server.auth import REALM
from ..sockets import (
    DEFAULT_BODY_DEADLINE_S,
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
)

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


@dataclass(frozen=True, slots=True)
class HttpOptions:
    """How ``serve-mcp --transport http`` guards its socket."""

    allowed_hosts: tuple[str, ...] = ()
    """More ``Host`` values to accept (``name``, ``name:port`` or ``name:*``)."""
    allowed_origins: tuple[str, ...] = ()
    """More ``Origin`` values to accept (``https://app.example``, or ``scheme://name:*``)."""
    token: str | None = None
    """The bearer token clients must send; required unless bound to loopback."""
    idle_timeout_s: float = 600.0
    max_sessions: int = 1000
    body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S
    """Seconds a request body may send nothing (the listener's and ``BodyTimeout``'s)."""
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S
    """Seconds a connection has to send a request's line and headers (the listener's)."""
    body_deadline_s: float = DEFAULT_BODY_DEADLINE_S
    """Seconds a request body has in all, plus one per 1,024 bytes (the listener's)."""
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    """Connections the listener holds at once (503 beyond)."""


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _any_port(names: tuple[str, ...]) -> list[str]:
    """The allowed ``Host`` values: each name as given, and a bare name (``api.example``,
    ``[::1]``) on any port too, as ``serve``'s ``--allowed-host`` matches it."""
    hosts: list[str] = []
    for name in names:
        hosts.append(name)
        bare = name.endswith("]") or ":" not in name
        if bare and name != "*":
            hosts.append(f"{name}:*")
    return hosts


def security(host: str, options: HttpOptions) -> TransportSecuritySettings:
    """The Host/Origin allow-lists for a socket bound to ``host``; ``ValueError`` for a wildcard
    bind without an allow-list."""
    hosts, origins = _any_port(options.allowed_hosts), list(options.allowed_origins)
    if is_loopback(host):
        hosts += ["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost", "[::1]"]
        origins += ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
    elif host in WILDCARD_HOSTS:
        if not hosts:
            raise ValueError(
                f"bound to {host or 'every address'}, the server accepts only the Host names "
                "you allow: pass --allowed-host NAME"
            )
    else:
        shown = f"[{host}]" if ":" in host else host
        hosts += [f"{shown}:*", shown]
        origins += [f"http://{shown}:*", f"https://{shown}:*"]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


def http_app(server: Server[Any], host: str, options: HttpOptions) -> ASGIApp:
    """``server``'s streamable HTTP app for a socket bound to ``host``, guarded as above;
    ``ValueError`` when bound off loopback without a token, or to a wildcard without hosts."""
    if not is_loopback(host) and not options.token:
        raise ValueError(
            f"bound to {host or 'every address'}, the MCP server needs a bearer token: set the "
            "admin token (--admin-token-file or $INVALIDATION_CONTRACTS_ADMIN_TOKEN)"
        )
    app: ASGIApp = server.streamable_http_app(
        host=host,
        transport_security=security(host, options),
        session_idle_timeout=options.idle_timeout_s,
        max_sessions=options.max_sessions,
    )
    app = BodyTimeout(app, options.body_timeout_s)
    if options.token:
        app = BearerToken(app, options.token)
    return app


class BearerToken:
    """ASGI middleware: HTTP requests need ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        presented = dict(scope.get("headers") or ()).get(b"authorization", b"")
        scheme, _, credential = presented.partition(b" ")
        # The scheme is case-insensitive (RFC 9110 §11.1), as ``serve`` reads it.
        matches = hmac.compare_digest(credential.strip(b" "), self._token)
        if scheme.lower() == b"bearer" and matches:
            await self.app(scope, receive, send)
            return
        await _plain(
            send,
            401,
            b"a bearer token is required",
            [(b"www-authenticate", f'Bearer realm="{REALM}"'.encode())],
        )


class BodyTimeout:
    """ASGI middleware: a request body that stalls ``timeout_s`` between chunks is answered
    408 (when nothing was sent yet) and the request abandoned."""

    def __init__(self, app: ASGIApp, timeout_s: float) -> None:
        self.app = app
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = stalled = False
        body_done = False

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if stalled:  # the app's answer to the disconnect it was told of: dropped
                return
            started = True
            await send(message)

        async def guarded_receive() -> Message:
            nonlocal body_done, stalled
            if body_done or stalled:  # after the body, waiting for a disconnect is no stall
                return await receive() if not stalled else {"type": "http.disconnect"}
            try:
                with anyio.fail_after(self.timeout_s):
                    message = await receive()
            except TimeoutError:
                stalled = True
                return {"type": "http.disconnect"}  # the app abandons the request
            if message.get("type") != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        await self.app(scope, guarded_receive, guarded_send)
        if stalled and not started:
            await _plain(send, 408, b"the request body stalled", [(b"connection", b"close")])


async def _plain(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"text/plain"), *headers],
        }
    )
    await send({"type": "http.response.body", "body": body})
