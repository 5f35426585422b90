"""The reference rows as plain resources with validators, as any API serves its resources.

``GET /resources/{table}/{key}`` answers one row with a strong ``ETag`` (its content etag) and
``GET /resources/{table}`` the table's rows with an ``ETag`` over every row's; a request whose
``If-None-Match`` names the current tag is answered ``304 Not Modified`` with no body (RFC 9110
§13.1.2). Served at every contract level, ``none`` included: a validator is HTTP, not the
contract, and it is what lets a client without the contract revalidate a fix before it injects
it (the ``verify`` policy). A 422 cites the rows each suggestion read in ``Link`` headers
(``protocol.links.citation``), so a client knows which resource to revalidate.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Protocol

from fastapi import APIRouter, Header
from pydantic import BaseModel, JsonValue, RootModel, WithJsonSchema
from starlette.responses import Response

from ...protocol.links import citation, resource_path
from ...protocol.problems import ProblemType, ProtocolError
from ..tables import thaw
from .errors import Answering, problem_route_class
from .openapi import responses
from .routing import LiteralRouter

if TYPE_CHECKING:
    from ..policies import Finding
    from ..state import RegistryState


class Resourceful(Answering, Protocol):
    """What the resource routes need: the registry state a read is answered from."""

    async def state_for(
        self, since: int | None = None, epoch: str | None = None
    ) -> RegistryState: ...


IfNoneMatch = Annotated[
    str | None,
    Header(alias="If-None-Match", max_length=1024, description="The ETags the client holds."),
    WithJsonSchema(
        {"type": "string", "maxLength": 1024, "description": "The ETags the client holds."}
    ),
]


def table_etag(etags: Mapping[str, str]) -> str:
    """A table's validator: over every row's etag, so any added, removed or changed row moves
    it."""
    digest = hashlib.sha256()
    for key in sorted(etags):
        digest.update(f"{len(key)}:{key}={etags[key]};".encode())
    return digest.hexdigest()[:32]


class ResourceRow(RootModel[dict[str, JsonValue]]):
    """One reference row as JSON (``GET /resources/{table}/{key}``)."""


class ResourceTable(BaseModel):
    """A reference table's rows by key (``GET /resources/{table}``)."""

    rows: dict[str, dict[str, JsonValue]]


def _documented(model: type[BaseModel], description: str) -> dict[int | str, dict[str, Any]]:
    """The answers of a resource read: the resource, 304, and the problems."""
    out = responses(model, description, 404, 422)
    out[304] = {"description": "Not modified: the `If-None-Match` tag is the current one."}
    return out


def resource_router(service: Resourceful, **options: Any) -> APIRouter:
    """``GET /resources/{table}`` and ``GET /resources/{table}/{key}``, conditional on
    ``If-None-Match``."""
    router = LiteralRouter(route_class=problem_route_class(service), **options)

    @router.get(
        "/resources/{table}",
        tags=["resources"],
        summary="A table's rows, with an ETag",
        responses=_documented(ResourceTable, "The table's rows; the ETag covers every row."),
    )
    async def table(table: str, if_none_match: IfNoneMatch = None) -> Response:
        snapshot = (await service.state_for(None, None)).snapshot(table)
        rows = {key: thaw(row) for key, row in snapshot.rows.items()}
        return _conditional(table_etag(snapshot.etags), if_none_match, {"rows": rows})

    @router.get(
        "/resources/{table}/{key}",
        tags=["resources"],
        summary="One row, with an ETag",
        responses=_documented(ResourceRow, "The row; its ETag moves when it changes."),
    )
    async def row(table: str, key: str, if_none_match: IfNoneMatch = None) -> Response:
        snapshot = (await service.state_for(None, None)).snapshot(table)
        found = snapshot.rows.get(key)
        if found is None:
            raise ProtocolError(ProblemType.NOT_FOUND, f"no row {key!r} in {table!r}")
        return _conditional(snapshot.etags[key], if_none_match, thaw(found))

    return router


def _conditional(etag: str, if_none_match: str | None, body: object) -> Response:
    """304 when the client's tag is the current one, else the body; both carry the ``ETag``."""
    tag = f'"{etag}"'
    headers = {"ETag": tag, "Cache-Control": "no-cache"}
    held = [t.strip() for t in (if_none_match or "").split(",")]
    if tag in held or "*" in held:
        return Response(status_code=304, headers=headers)
    content = json.dumps(body, separators=(",", ":"), sort_keys=True).encode()
    return Response(content, headers=headers, media_type="application/json")


def citation_links(findings: tuple[Finding, ...], root: str = "") -> list[str]:
    """The ``Link`` values citing, for each suggestion (a finding, in order), the rows it read:
    one row resource per key read, the table's resource where it read the key set or the whole
    table."""
    links = []
    for index, finding in enumerate(findings):
        for name in finding.tables_in_read_order:
            keys = finding.reads.get(name)
            if keys is None or name in finding.key_sets:
                links.append(citation(index, root + resource_path(name)))
            else:
                links.extend(citation(index, root + resource_path(name, k)) for k in sorted(keys))
    return links
