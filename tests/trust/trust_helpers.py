"""Shared pieces of the trust tests: the Acme API in-process, hostile servers, and an agent session.

Every attack runs against the real provider (``create_app``) made hostile from outside — a
wrapper that touches tables on every request, a transport that rewrites what the server said —
or against a forging server written out in full, so no test relies on the memory's internals.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from invalidation_contracts.client.memory import FixMemory
from invalidation_contracts.domains import get_catalog
from invalidation_contracts.httpx import EPISODE_EXTENSION, AsyncContractTransport
from invalidation_contracts.server import read_snapshot
from invalidation_contracts.server.http.app import create_app

ORIGIN = "http://acme.test"
ROUTE = "/v1/subscriptions"
OPERATION = f"POST {ROUTE}"
"""The operation the transport files the route's fixes under (``METHOD path``)."""
TOKEN = "trust-admin-token"
CATALOG = get_catalog("acme_billing")
GROWTH = dict(CATALOG.task_families["governed-partner-growth"].fields)
"""Needs the CSM promo code of ``active_csm_codes:plan_partner_growth`` (rotated by drift)."""
STARTER = dict(CATALOG.task_families["control-partner-starter"].fields)
"""Needs the CSM promo code of ``active_csm_codes:plan_partner_starter`` (never rotated)."""
FUNDING = dict(CATALOG.task_families["funding-enterprise-annual"].fields)
"""Needs a credit token: reads ``token_funding_map`` and two more tables."""
PLAIN = dict(CATALOG.task_families["plain-starter-monthly"].fields)
"""Passes every policy."""


def touch_version(version: str) -> str:
    """A version one step past ``version``, before any real bump (``1.0.0`` → ``1.0.0.1``)."""
    parts = version.split(".")
    if len(parts) >= 4:
        parts[-1] = str(int(parts[-1]) + 1)
    else:
        parts.append("1")
    return ".".join(parts)


def touching_app(domain: Any, **options: Any) -> Any:
    """A hostile provider: before every domain request it bumps every table's version (a touch).

    The rows never change and its changes feed says so; only the stamps move, on every response.
    """
    app = create_app(domain, **options)
    registry = app.state.registry

    @app.middleware("http")
    async def touch_everything(request, call_next):
        if request.url.path.startswith("/v1/"):
            for name, snapshot in registry.state.tables.items():
                registry.reload(name, snapshot.plain_rows(), touch_version(snapshot.version))
        return await call_next(request)

    return app


def acme_app(**options: Any) -> Any:
    """The honest Acme provider at L6 with a fresh registry."""
    return create_app(
        CATALOG.domain, registry=CATALOG.domain.registry(), admin_token=TOKEN, **options
    )


def rotate_growth_code(app: Any) -> None:
    """The scenario's breaking drift: ``active_csm_codes`` rotates the growth plan's code."""
    snap = read_snapshot(CATALOG.snapshots["active_csm_codes.rotation-1"])
    app.state.registry.reload(snap.table, snap.rows, snap.version)


Edit = Callable[[dict[str, Any]], dict[str, Any]]


class TamperingTransport(httpx.AsyncBaseTransport):
    """An on-path attacker: rewrites JSON response bodies (keeping every header, signature too)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, edit: Edit, *, when: str = "/v1/") -> None:
        self.inner = inner
        self.edit = edit
        self.when = when
        self.enabled = True

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        content = await response.aread()
        if not self.enabled or not request.url.path.startswith(self.when):
            return httpx.Response(response.status_code, headers=response.headers, content=content)
        body = self.edit(json.loads(content))
        headers = {k: v for k, v in response.headers.items() if k.lower() != "content-length"}
        return httpx.Response(
            response.status_code, headers=headers, content=json.dumps(body).encode("utf-8")
        )


class Session:
    """An agent: one fix memory talking to in-process servers through the contract transport."""

    def __init__(self, memory: FixMemory, transport: httpx.AsyncBaseTransport) -> None:
        self.memory = memory
        self.transport = transport
        self.events: list[Any] = []

    def post(
        self,
        body: Mapping[str, Any],
        *,
        origin: str = ORIGIN,
        episode: int | None = None,
        path: str = ROUTE,
    ) -> httpx.Response:
        return self.send("POST", origin + path, json=dict(body), episode=episode)

    def send(
        self, method: str, url: str, *, episode: int | None = None, **kwargs: Any
    ) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = AsyncContractTransport(
                self.memory, self.transport, listener=self.events.append
            )
            async with httpx.AsyncClient(transport=transport) as client:
                extensions = {EPISODE_EXTENSION: episode} if episode is not None else {}
                return await client.request(method, url, extensions=extensions, **kwargs)

        return asyncio.run(go())

    def of(self, kind: type) -> list[Any]:
        return [event for event in self.events if isinstance(event, kind)]


def asgi(app: Any) -> httpx.AsyncBaseTransport:
    """An in-process transport to ``app`` that stays open across the session's clients."""
    return _Unclosable(httpx.ASGITransport(app=app))


class _Unclosable(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.inner.handle_async_request(request)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1_750_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


Forge = Callable[[httpx.Request], "httpx.Response | None"]


class ForgingTransport(httpx.AsyncBaseTransport):
    """An on-path attacker that answers some requests itself (``forge`` returns a response)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, forge: Forge) -> None:
        self.inner = inner
        self.forge = forge

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        forged = self.forge(request)
        if forged is not None:
            return forged
        return await self.inner.handle_async_request(request)


def problem_json(status: int, body: Mapping[str, Any]) -> httpx.Response:
    return httpx.Response(
        status,
        content=json.dumps(body).encode("utf-8"),
        headers={"content-type": "application/problem+json"},
    )
