"""The contract's read routes: ``/contract/versions``, ``/changes``, ``/graph``, ``/rules``, and
the worker's probes ``/contract/live`` and ``/contract/ready`` (``health``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import WithJsonSchema
from starlette.responses import Response

from ...protocol.levels import Level
from ...protocol.models import ChangesFeed, ContractFields, GraphListing, RulesListing
from ..tables import MAX_SAFE_INTEGER
from .auth import admin_dependency
from .errors import problem_route_class, wire
from .headers import ContractEpoch, ContractPosition, ContractSince
from .health import add_health_routes
from .openapi import AUTH_ERRORS, responses
from .watch_routes import add_watch_route


def contract_router(service: Any, **options: Any) -> APIRouter:
    """The contract routes of ``service``; ``options`` go to ``APIRouter`` (e.g. ``prefix``)."""
    router = APIRouter(route_class=problem_route_class(service), **options)

    @router.get(
        "/contract/versions",
        tags=["contract"],
        summary="The current response-level contract fields",
        responses=responses(
            ContractFields, "table_versions, rules_version, contract_seq, contract_epoch.", 404, 422
        ),
    )
    async def versions(since: ContractSince = None, epoch: ContractEpoch = None) -> Response:
        service.require_level(Level.STRUCTURED, "GET /contract/versions")
        state = await service.state_for(since, epoch)
        return wire(service.contract(state, since, epoch), since=since)

    @router.get(
        "/contract/changes",
        tags=["contract"],
        summary="Every change after a seq, or 410 resync-required",
        responses=responses(
            ChangesFeed,
            "Row changes, table transitions and rule changes after `since`.",
            404,
            410,
            422,
        ),
    )
    async def changes(
        since: Annotated[
            int, Query(ge=0, le=MAX_SAFE_INTEGER, description="The last seq the client has seen.")
        ],
        tables: Annotated[
            str | None,
            Query(description="Comma-separated table names to report."),
            WithJsonSchema({"type": "string", "description": "Comma-separated table names."}),
        ] = None,
        epoch: Annotated[
            str | None,
            Query(description="The epoch `since` belongs to."),
            WithJsonSchema({"type": "string", "description": "The epoch `since` belongs to."}),
        ] = None,
        position: ContractPosition = None,
    ) -> Response:
        service.require_level(Level.STRUCTURED, "GET /contract/changes")
        state = await service.state_for(max(since, position or 0), epoch)
        wanted = (
            None if tables is None else [name.strip() for name in tables.split(",") if name.strip()]
        )
        opaque = service.provider.opaque
        registry = service.registry
        if opaque is None:
            return wire(registry.changes(since, wanted or None, epoch))
        if wanted:
            wanted = opaque.tables_named(wanted, state.tables)
        return wire(opaque.feed(registry.changes(since, wanted or None, epoch)))

    graph_guard = (
        [Depends(admin_dependency(service))]
        if service.protect_graph and service.level.graph
        else []
    )

    @router.get(
        "/contract/graph",
        tags=["contract"],
        dependencies=graph_guard,
        include_in_schema=service.level.graph,
        summary="The versioned knowledge graph (L5)",
        responses=responses(
            GraphListing,
            "Nodes table:key and one edge per rule instance.",
            *(AUTH_ERRORS if graph_guard else ()),
            404,
            422,
        ),
    )
    async def graph(position: ContractPosition = None, epoch: ContractEpoch = None) -> Response:
        service.require_level(Level.SUBGRAPH, "GET /contract/graph")
        listing = (await service.state_for(position, epoch)).graph_listing()
        opaque = service.provider.opaque
        return wire(opaque.graph(listing) if opaque is not None else listing)

    @router.get(
        "/contract/rules",
        tags=["contract"],
        summary="The rule declarations in force",
        responses=responses(RulesListing, "The rules and their rules_version.", 404, 422),
    )
    async def rules(position: ContractPosition = None, epoch: ContractEpoch = None) -> Response:
        service.require_level(Level.STRUCTURED, "GET /contract/rules")
        listing = (await service.state_for(position, epoch)).rules_listing()
        opaque = service.provider.opaque
        return wire(opaque.rules_listing(listing) if opaque is not None else listing)

    add_health_routes(router, service)
    add_watch_route(router, service)
    return router
