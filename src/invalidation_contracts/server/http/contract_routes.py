"""The contract's read routes: ``/contract/versions``, ``/changes``, ``/graph``, ``/rules``, and
the worker's probes ``/contract/live`` and ``/contract/ready`` (``health``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Protocol

from fastapi import APIRouter, Depends, Query
from pydantic import WithJsonSchema
from starlette.responses import Response

from ...protocol.models import ChangesFeed, ContractFields, GraphListing, RulesListing
from ..reads import ContractRead, require_level
from ..tables import MAX_SAFE_INTEGER
from .auth import Guarded, admin_dependency
from .errors import Answering, problem_route_class, wire
from .headers import ContractEpoch, ContractPosition, ContractSince
from .health import Probed, add_health_routes
from .openapi import AUTH_ERRORS, responses
from .routing import LiteralRouter
from .watch_routes import Watchable, add_watch_route

if TYPE_CHECKING:
    from ...protocol.levels import Level
    from ..provider import Provider
    from ..reads import ReadAnswer


class Readable(Answering, Guarded, Probed, Watchable, Protocol):
    """What the contract routes need: the level, the provider's one read API at the state a
    client's position needs, whether the graph is behind the admin token, and what the probes,
    the watch route and the admin dependency need."""

    @property
    def level(self) -> Level: ...

    @property
    def provider(self) -> Provider: ...

    @property
    def protect_graph(self) -> bool: ...


def contract_router(service: Readable, **options: Any) -> APIRouter:
    """The contract routes of ``service``; ``options`` go to ``APIRouter`` (e.g. ``prefix``)."""
    router = LiteralRouter(route_class=problem_route_class(service), **options)

    async def answer(read: ContractRead, what: str) -> ReadAnswer:
        """The one read API (``Provider.read``) at the state the client's position needs."""
        require_level(service.level, read, what)
        state = await service.state_for(read.catch_up, read.epoch)
        return service.provider.read(read, state, what=what)

    @router.get(
        "/contract/versions",
        tags=["contract"],
        summary="The current response-level contract fields",
        responses=responses(
            ContractFields, "table_versions, rules_version, contract_seq, contract_epoch.", 404, 422
        ),
    )
    async def versions(since: ContractSince = None, epoch: ContractEpoch = None) -> Response:
        read = ContractRead("versions", since=since, epoch=epoch)
        return wire(await answer(read, "GET /contract/versions"), since=since)

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
        wanted = (
            None if tables is None else [name.strip() for name in tables.split(",") if name.strip()]
        )
        read = ContractRead(
            "changes",
            since=since,
            epoch=epoch,
            position=position,
            tables=tuple(wanted) if wanted else None,
        )
        return wire(await answer(read, "GET /contract/changes"))

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
        read = ContractRead("graph", epoch=epoch, position=position)
        return wire(await answer(read, "GET /contract/graph"))

    @router.get(
        "/contract/rules",
        tags=["contract"],
        summary="The rule declarations in force",
        responses=responses(RulesListing, "The rules and their rules_version.", 404, 422),
    )
    async def rules(position: ContractPosition = None, epoch: ContractEpoch = None) -> Response:
        read = ContractRead("rules", epoch=epoch, position=position)
        return wire(await answer(read, "GET /contract/rules"))

    add_health_routes(router, service)
    add_watch_route(router, service)
    return router
