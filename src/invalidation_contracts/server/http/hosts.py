"""The ``Host`` allow-list: a loopback server answers only requests addressed to it by name.

A page on another site can make a browser send requests to ``127.0.0.1`` under its own name by
DNS rebinding; ``serve`` then answered them (reliability audit 2, N12: ``Host: attacker.example``
got 200 on the domain routes and ``/contract/graph``). ``HostCheck`` refuses a request whose
``Host`` names no allowed host with ``421 misdirected-request`` (RFC 9110 §15.5.20), a problem
document, before any route runs. ``serve`` allows the loopback names by default; ``*`` allows any.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ...protocol.problems import ProblemType

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

#: The names a loopback server answers to by default.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port (IPv6 literals without brackets)."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class HostCheck:
    """ASGI middleware: 421 for a request whose ``Host`` is not in ``allowed``."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = frozenset(host_name(name) for name in allowed)
        self.any = "*" in self.allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.any:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        host = headers.get(b"host", b"").decode("latin-1")
        if host_name(host) in self.allowed:
            await self.app(scope, receive, send)
            return
        kind = ProblemType.MISDIRECTED_REQUEST
        body = json.dumps(
            {
                "type": kind.uri,
                "title": kind.title,
                "status": kind.status,
                "detail": "this server does not answer for that Host; see --allowed-host",
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": kind.status,
                "headers": [
                    (b"content-type", b"application/problem+json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
