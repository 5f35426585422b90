"""The domain's routes in the standalone form: JSON body in, ``SuccessResponse`` or 422 out."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

from ...protocol.models import SuccessResponse
from ..asked import PLAIN, Asked
from ..domain import Route
from .errors import Answering, outcome_response, problem_route_class, read_json
from .headers import CONTRACT_PATCHABLE, ContractEpoch, ContractSince
from .openapi import BODY_ERRORS, request_body, responses
from .resource_routes import citation_links
from .routing import LiteralRouter

if TYPE_CHECKING:
    from ...protocol.levels import Level
    from ..domain import Domain
    from ..provider import Outcome


class DomainServing(Answering, Protocol):
    """What the domain's routes need: the domain, the worker's handling of one request, the
    body cap, and problem answers."""

    @property
    def domain(self) -> Domain: ...

    @property
    def max_body_bytes(self) -> int: ...

    @property
    def cites_resources(self) -> bool: ...

    @property
    def level(self) -> Level: ...

    def handle(self, route: Route[Any], payload: object, asked: Asked = PLAIN) -> Outcome: ...


BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def domain_router(service: DomainServing, **options: Any) -> APIRouter:
    """Every route of ``service.domain``; each answer's stamps and suggestions share one state."""
    router = LiteralRouter(route_class=problem_route_class(service), **options)
    domain = service.domain
    # One allowlist per origin (SPEC §10.4): the union over the routes, on every answer.
    patchable = ", ".join(sorted({f for route in domain.routes for f in route.patchable_fields}))
    for route in domain.routes:
        if route.method.upper() not in BODY_METHODS:
            raise ValueError(
                f"route {route.path}: only {sorted(BODY_METHODS)} routes (JSON body) are served"
            )
        router.add_api_route(
            route.path,
            _endpoint(service, route, patchable),
            methods=[route.method.upper()],
            summary=route.summary or None,
            tags=[domain.name],
            responses=responses(
                SuccessResponse,
                "The request passed every policy; the contract fields ride along.",
                *BODY_ERRORS,
            ),
            openapi_extra={
                **request_body(route.request_model),
                "x-contract-patchable": sorted(route.patchable_fields),
            },
            name=f"{domain.name}:{route.path}",
        )
    return router


def _endpoint(service: DomainServing, route: Route[Any], patchable: str) -> Callable[..., Any]:
    async def endpoint(
        request: Request, since: ContractSince = None, epoch: ContractEpoch = None
    ) -> Response:
        payload = await read_json(request, service.max_body_bytes)
        # In a worker thread: a route's success handler may do I/O (the ledger, a payments API),
        # and a worker behind the client catches up first.
        asked = Asked(since, epoch, request.url.path)
        outcome = await run_in_threadpool(service.handle, route, payload, asked)
        response = outcome_response(outcome, since)
        if outcome.status == 422 and service.cites_resources and service.level.suggests:
            root = str(request.scope.get("root_path", ""))
            for link in citation_links(outcome.findings, root):
                response.headers.append("link", link)
        if patchable:
            response.headers[CONTRACT_PATCHABLE] = patchable
        return response

    return endpoint
