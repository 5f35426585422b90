"""``ContractService``: a ``ContractWorker`` (``server.worker.contract``) with its HTTP pieces.

The routers, the route class for an existing app's routes and the app lifespan are thin users of
the worker; the standalone app (``server.http.app``) is built from them.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter
from fastapi.routing import APIRoute
from starlette.applications import Starlette

from ..._deprecation import moved_names
from ..worker.contract import ContractWorker

__getattr__ = moved_names(
    __name__,
    {
        "RETRY_AFTER_S": "invalidation_contracts.server.worker.contract",
        "unavailable": "invalidation_contracts.server.worker.contract",
    },
)


class ContractService(ContractWorker):
    """The contract of one domain in one worker process, with its HTTP routers."""

    cites_resources = False
    """Whether the domain routes' 422s cite resources (``resource_router`` was built)."""

    @functools.cached_property
    def contract_bases(self) -> dict[int, str | None]:
        """Per app: where its contract routes live (``discovery``)."""
        return {}

    @functools.cached_property
    def contract_links(self) -> dict[tuple[int, str], bytes | None]:
        """Per app and root path: the encoded ``Link`` value its answers carry (``discovery``)."""
        return {}

    @asynccontextmanager
    async def lifespan(self, app: Starlette | None = None) -> AsyncIterator[None]:
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

    def resource_router(self, **options: Any) -> APIRouter:
        """``/resources/{table}[/{key}]``: the reference rows with ``ETag`` validators; once
        included, the domain routes' 422s cite the rows each suggestion read (``Link``)."""
        from .resource_routes import resource_router

        self.cites_resources = True
        return resource_router(self, **options)

    def domain_router(self, **options: Any) -> APIRouter:
        """The domain's own routes in the standalone form (``create_app``'s)."""
        from .domain_routes import domain_router

        return domain_router(self, **options)

    @functools.cached_property
    def route_class(self) -> type[APIRoute]:
        """An ``APIRoute`` class for an existing app's routes: the policy check and the stamps."""
        from .retrofit import contract_route_class

        return contract_route_class(self)

    def router(self, **options: Any) -> APIRouter:
        """An ``APIRouter`` whose routes carry the contract (``route_class`` set)."""
        return APIRouter(route_class=self.route_class, **options)
