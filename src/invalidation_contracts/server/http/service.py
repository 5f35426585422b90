"""``ContractService``: a ``ContractWorker`` (``server.worker.contract``) with its HTTP pieces.

The routers, the route class for an existing app's routes and the app lifespan are thin users of
the worker; the standalone app (``server.http.app``) is built from them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter
from fastapi.routing import APIRoute

from ..auth import BearerAuth
from ..config import DEFAULT_MAX_BODY_BYTES
from ..provider import Provider
from ..trust import TrustOptions
from ..worker.contract import RETRY_AFTER_S as RETRY_AFTER_S
from ..worker.contract import ContractWorker
from ..worker.contract import unavailable as unavailable
from ..worker.runtime import Runtime


class ContractService(ContractWorker):
    """The contract of one domain in one worker process, with its HTTP routers."""

    def __init__(
        self,
        provider: Provider,
        runtime: Runtime,
        *,
        auth: BearerAuth,
        protect_graph: bool = False,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        trust: TrustOptions | None = None,
    ) -> None:
        super().__init__(
            provider,
            runtime,
            auth=auth,
            protect_graph=protect_graph,
            max_body_bytes=max_body_bytes,
            trust=trust,
        )
        self._route_class: type[APIRoute] | None = None
        self.contract_bases: dict[int, str | None] = {}
        """Per app: where its contract routes live (``discovery``)."""

    @asynccontextmanager
    async def lifespan(self, app: Any = None) -> AsyncIterator[None]:
        """For ``FastAPI(lifespan=service.lifespan)``, or to enter from an app's own lifespan.

        Given the app, it first checks that every domain route is served where the domain says
        (``RuntimeError`` otherwise: a policy that never runs must not start).
        """
        if app is not None:
            from .retrofit import check_routes

            check_routes(self, app)
        self.start()
        try:
            yield
        finally:
            self.close()

    # -- HTTP pieces -----------------------------------------------------------------------------

    def contract_router(self, **options: Any) -> APIRouter:
        """``/contract/versions``, ``/changes``, ``/graph``, ``/rules`` (include under a prefix)."""
        from .contract_routes import contract_router

        return contract_router(self, **options)

    def admin_router(self, **options: Any) -> APIRouter:
        """``/admin/reload-table``, ``/patch-table``, ``/rules`` behind the admin token."""
        from .admin_routes import admin_router

        return admin_router(self, **options)

    def domain_router(self, **options: Any) -> APIRouter:
        """The domain's own routes in the standalone form (``create_app``'s)."""
        from .domain_routes import domain_router

        return domain_router(self, **options)

    @property
    def route_class(self) -> type[APIRoute]:
        """An ``APIRoute`` class for an existing app's routes: the policy check and the stamps."""
        if self._route_class is None:
            from .retrofit import contract_route_class

            self._route_class = contract_route_class(self)
        return self._route_class

    def router(self, **options: Any) -> APIRouter:
        """An ``APIRouter`` whose routes carry the contract (``route_class`` set)."""
        return APIRouter(route_class=self.route_class, **options)
