"""An incoming W3C ``traceparent`` honoured: the provider's spans join the caller's trace.

``IncomingTrace`` is pure ASGI middleware: a request that carries ``traceparent`` (and optionally
``tracestate``) runs with the remote span context extracted by the W3C propagator as its current
context, so the ``invalidation_contracts.policy_evaluation`` span of that request is a child of
the caller's span instead of a root. A request without the header costs one scan of its headers;
a malformed header is ignored (the propagator yields no context), never an error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opentelemetry import context  # the package's guard checked the extra
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

_PROPAGATOR = TraceContextTextMapPropagator()
_HEADERS = {b"traceparent": "traceparent", b"tracestate": "tracestate"}


class IncomingTrace:
    """Each HTTP request that names a trace runs inside it (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        carrier: dict[str, str] = {}
        if scope.get("type") == "http":
            for name, value in scope.get("headers") or ():
                key = _HEADERS.get(name)
                if key is not None:
                    carrier[key] = value.decode("latin-1")
        if "traceparent" not in carrier:
            await self.app(scope, receive, send)
            return
        token = context.attach(_PROPAGATOR.extract(carrier))
        try:
            await self.app(scope, receive, send)
        finally:
            context.detach(token)
