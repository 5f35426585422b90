"""The operator's routes: reload or patch a table, change several tables at once, replace the
rules (admin token required).

For a table read from the provider's database, a reload or patch is written to that database and
reaches the registry through the change capture, like any other writer's change.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel
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
    WireModel,
)
from ..rules import Rule
from .auth import Guarded, admin_dependency
from .errors import Answering, problem_route_class, read_model, wire
from .openapi import AUTH_ERRORS, BODY_ERRORS, request_body, responses
from .routing import LiteralRouter

if TYPE_CHECKING:
    from collections.abc import Mapping

M = TypeVar("M", bound=BaseModel)


class Administered(Answering, Guarded, Protocol):
    """What the admin routes need: the worker's writes, its quarantine, its body cap, and what
    the admin dependency and problem answers need."""

    @property
    def max_body_bytes(self) -> int: ...

    def reload(
        self, table: str, rows: Mapping[str, Any], version: str | None = None
    ) -> ReloadResult: ...

    def patch(
        self,
        table: str,
        upsert: Mapping[str, Any],
        delete: list[str],
        version: str | None = None,
    ) -> ReloadResult: ...

    def change_set(self, request: ChangeSetRequest) -> ChangeSetResult: ...

    def set_rules(self, rules: list[Rule]) -> RulesResult: ...

    def quarantined(self) -> QuarantineListing: ...


@dataclass(frozen=True, slots=True)
class _Change(Generic[M]):
    """One admin route that reads a body and changes the registry: its path and endpoint name, its
    OpenAPI summary, the body it reads, what it answers (and its problem statuses beyond the body
    and auth ones), and the call on the service that does the work (in a worker thread)."""

    path: str
    name: str
    summary: str
    body: type[M]
    result: type[WireModel]
    described: str
    errors: tuple[int, ...]
    act: Callable[[Administered, M], WireModel]


def _reload(service: Administered, body: ReloadRequest) -> WireModel:
    return service.reload(body.table, body.rows, body.version)


def _patch(service: Administered, body: PatchTableRequest) -> WireModel:
    return service.patch(body.table, body.upsert, body.delete, body.version)


def _change_set(service: Administered, body: ChangeSetRequest) -> WireModel:
    return service.change_set(body)


def _set_rules(service: Administered, body: RulesRequest) -> WireModel:
    return service.set_rules([Rule.from_declaration(declaration) for declaration in body.rules])


_CHANGES: tuple[_Change[Any], ...] = (
    _Change(
        "/admin/reload-table",
        "reload_table",
        "Replace a table's rows; returns the diff and the downstream nodes it affects",
        ReloadRequest,
        ReloadResult,
        "The reload (a no-op when nothing changed).",
        (404, 409),
        _reload,
    ),
    _Change(
        "/admin/patch-table",
        "patch_table",
        "Upsert and delete rows of a table; costs in proportion to the change",
        PatchTableRequest,
        ReloadResult,
        "The patch (a no-op when nothing changed).",
        (404, 409),
        _patch,
    ),
    _Change(
        "/admin/change-set",
        "change_set",
        "Reload or patch several tables at once, under one contract_seq",
        ChangeSetRequest,
        ChangeSetResult,
        "One result per table, in request order, all under the same seq.",
        (404, 409),
        _change_set,
    ),
    _Change(
        "/admin/rules",
        "set_rules",
        "Replace the rule declarations",
        RulesRequest,
        RulesResult,
        "The old and new rules_version and the triples that changed.",
        (),
        _set_rules,
    ),
)


def admin_router(service: Administered, **options: Any) -> APIRouter:
    """The admin routes of ``service``; ``options`` go to ``APIRouter`` (e.g. ``prefix``)."""
    router = LiteralRouter(route_class=problem_route_class(service), **options)
    admin = [Depends(admin_dependency(service))]
    for change in _CHANGES:
        router.add_api_route(
            change.path,
            _endpoint(service, change),
            methods=["POST"],
            name=change.name,
            dependencies=admin,
            tags=["admin"],
            summary=change.summary,
            responses=responses(
                change.result, change.described, *BODY_ERRORS, *AUTH_ERRORS, *change.errors
            ),
            openapi_extra=request_body(change.body, inline=True),
        )

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


def _endpoint(
    service: Administered, change: _Change[M]
) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint of ``change``: read and check the body, do the change, answer its result."""

    async def endpoint(request: Request) -> Response:
        body = await read_model(request, change.body, service.max_body_bytes)
        return wire(await run_in_threadpool(change.act, service, body))

    return endpoint
