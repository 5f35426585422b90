"""The operator's routes: reload or patch a table, change several tables at once, replace the
rules (admin token required).

For a table read from the provider's database, a reload or patch is written to that database and
reaches the registry through the change capture, like any other writer's change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from starlette.responses import Response

from ...protocol.models import (
    ChangeSetRequest,
    ChangeSetResult,
    PatchTableRequest,
    QuarantineListing,
    ReloadRequest,
    ReloadResult,
    RulesRequest,
    RulesResult,
)
from ..rules import Rule
from .auth import admin_dependency
from .errors import problem_route_class, read_model, wire
from .openapi import AUTH_ERRORS, BODY_ERRORS, request_body, responses
from .routing import LiteralRouter

if TYPE_CHECKING:
    from .service import ContractService


def admin_router(service: ContractService, **options: Any) -> APIRouter:
    """The admin routes of ``service``; ``options`` go to ``APIRouter`` (e.g. ``prefix``)."""
    router = LiteralRouter(route_class=problem_route_class(service), **options)
    admin = [Depends(admin_dependency(service))]

    @router.post(
        "/admin/reload-table",
        dependencies=admin,
        tags=["admin"],
        summary="Replace a table's rows; returns the diff and the downstream nodes it affects",
        responses=responses(
            ReloadResult,
            "The reload (a no-op when nothing changed).",
            *BODY_ERRORS,
            *AUTH_ERRORS,
            404,
            409,
        ),
        openapi_extra=request_body(ReloadRequest, inline=True),
    )
    async def reload_table(request: Request) -> Response:
        body = await read_model(request, ReloadRequest, service.max_body_bytes)
        result = await run_in_threadpool(service.reload, body.table, body.rows, body.version)
        return wire(result)

    @router.post(
        "/admin/patch-table",
        dependencies=admin,
        tags=["admin"],
        summary="Upsert and delete rows of a table; costs in proportion to the change",
        responses=responses(
            ReloadResult,
            "The patch (a no-op when nothing changed).",
            *BODY_ERRORS,
            *AUTH_ERRORS,
            404,
            409,
        ),
        openapi_extra=request_body(PatchTableRequest, inline=True),
    )
    async def patch_table(request: Request) -> Response:
        body = await read_model(request, PatchTableRequest, service.max_body_bytes)
        result = await run_in_threadpool(
            service.patch, body.table, body.upsert, body.delete, body.version
        )
        return wire(result)

    @router.post(
        "/admin/change-set",
        dependencies=admin,
        tags=["admin"],
        summary="Reload or patch several tables at once, under one contract_seq",
        responses=responses(
            ChangeSetResult,
            "One result per table, in request order, all under the same seq.",
            *BODY_ERRORS,
            *AUTH_ERRORS,
            404,
            409,
        ),
        openapi_extra=request_body(ChangeSetRequest, inline=True),
    )
    async def change_set(request: Request) -> Response:
        body = await read_model(request, ChangeSetRequest, service.max_body_bytes)
        return wire(await run_in_threadpool(service.change_set, body))

    @router.post(
        "/admin/rules",
        dependencies=admin,
        tags=["admin"],
        summary="Replace the rule declarations",
        responses=responses(
            RulesResult,
            "The old and new rules_version and the triples that changed.",
            *BODY_ERRORS,
            *AUTH_ERRORS,
        ),
        openapi_extra=request_body(RulesRequest, inline=True),
    )
    async def set_rules(request: Request) -> Response:
        body = await read_model(request, RulesRequest, service.max_body_bytes)
        rules = [Rule.from_declaration(declaration) for declaration in body.rules]
        return wire(await run_in_threadpool(service.set_rules, rules))

    @router.get(
        "/admin/quarantine",
        dependencies=admin,
        tags=["admin"],
        summary="Rows of SQL tables the contract cannot carry, set aside (SPEC 8.3)",
        responses=responses(
            QuarantineListing, "Every quarantined row, as a problem object.", *AUTH_ERRORS, 503
        ),
    )
    async def quarantine() -> Response:
        return wire(await run_in_threadpool(service.quarantined))

    return router
