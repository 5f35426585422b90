"""Every error as an RFC 9457 problem document carrying the contract fields of the current state.

Two ways in: ``ProblemRoute`` turns the errors of the contract's own routes into problem documents
whatever app they are included in (the app's exception handlers are never touched), and
``install_problem_handlers`` does the same app-wide for the standalone app (``create_app``),
where routing errors (404, 405) are the contract's too. A worker that cannot read its registry
answers 503 without contract fields: it sends no stamps it cannot vouch for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import Response

from ...protocol.models import Problem, WireModel
from ...protocol.problems import ProblemType, ProtocolError, problem
from ..faults import PolicyError
from ..http_errors import (
    plain_status_problem,
    problem_response,
    request_validation_errors,
    status_problem_type,
)
from ..ingest import SourceError
from ..store import StorageError
from .discovery import add_link
from .headers import CONTRACT_SINCE, lenient_epoch, lenient_since

logger = logging.getLogger(__name__)

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def wire(
    body: WireModel, *, status: int = 200, since: int | None = None, content: bytes | None = None
) -> Response:
    """A wire object as the response (a problem document as ``application/problem+json``).

    ``content``: the body already encoded (``Outcome.content``), sent as it is.
    """
    headers = {CONTRACT_SINCE: str(since)} if since is not None else None
    if isinstance(body, Problem):
        return problem_response(body, headers, content)
    return Response(
        body.to_json() if content is None else content,
        status_code=status,
        headers=headers,
        media_type="application/json",
    )


def answer(
    service: Any, request: Request, body: Problem, headers: Mapping[str, str] | None = None
) -> Response:
    """``body`` with the request's path as ``instance`` and the current contract fields."""
    update: dict[str, Any] = {"instance": body.instance or request.url.path}
    out = dict(headers or {})
    unreadable = body.type == ProblemType.REGISTRY_UNAVAILABLE.uri
    if not unreadable and service.available:
        since = lenient_since(request)
        epoch = lenient_epoch(request) if since is not None else None
        update.update(
            service.contract(service.registry.state, since, epoch).model_dump(exclude_none=True)
        )
        if since is not None:
            out[CONTRACT_SINCE] = str(since)
    return add_link(service, request, problem_response(body.model_copy(update=update), out))


def problem_of(request: Request, exc: Exception) -> tuple[Problem, Mapping[str, str] | None]:
    """The problem document (and headers) an exception is answered with."""
    if isinstance(exc, ProtocolError):
        return exc.to_problem(), exc.extra.get("headers")
    if isinstance(exc, RequestValidationError):
        errors = request_validation_errors(exc.errors())
        detail = "a query parameter or header is invalid"
        return problem(ProblemType.INVALID_REQUEST, detail, errors=errors), None
    if isinstance(exc, StarletteHTTPException):
        kind = status_problem_type(exc.status_code)
        if kind is ProblemType.NOT_FOUND:
            body = problem(kind, f"no resource at {request.method} {request.url.path}")
        elif kind is ProblemType.METHOD_NOT_ALLOWED:
            body = problem(kind, f"{request.method} is not allowed on {request.url.path}")
        elif kind is not None:
            body = problem(kind, str(exc.detail))
        else:
            body = plain_status_problem(exc.status_code, str(exc.detail))
        return body, exc.headers
    if isinstance(exc, StorageError):
        logger.error("registry change not persisted: %s", exc)
        detail = "the change could not be persisted; the registry is unchanged"
        return problem(ProblemType.INTERNAL, detail), None
    if isinstance(exc, PolicyError):
        logger.error("%s %s: provider bug: %s", request.method, request.url.path, exc)
        return problem(ProblemType.INTERNAL, "the server failed to answer this request"), None
    if isinstance(exc, SourceError):
        logger.error("the provider's database failed: %s", exc)
        return problem(ProblemType.REGISTRY_UNAVAILABLE, str(exc)), {"Retry-After": "1"}
    return problem(ProblemType.INTERNAL, "the server failed to answer this request"), None


#: What the contract's own routes turn into problem documents themselves.
HANDLED: tuple[type[Exception], ...] = (
    ProtocolError,
    RequestValidationError,
    StarletteHTTPException,
    StorageError,
    SourceError,
    PolicyError,
)


class ProblemRoute(APIRoute):
    """A route whose protocol errors are answered as problem documents by the route itself."""

    service: Any = None

    def get_route_handler(self) -> Handler:
        original = super().get_route_handler()
        service = self.service

        async def handler(request: Request) -> Response:
            try:
                response = await original(request)
            except HANDLED as exc:
                return answer(service, request, *problem_of(request, exc))
            return add_link(service, request, response)

        return handler


def problem_route_class(service: Any) -> type[ProblemRoute]:
    return type("ContractProblemRoute", (ProblemRoute,), {"service": service})


def install_problem_handlers(app: FastAPI, service: Any) -> None:
    """App-wide: every error of the standalone app is a problem document (``create_app``)."""

    async def on_error(request: Request, exc: Exception) -> Response:
        # For an unexpected exception Starlette re-raises after sending this, so the ASGI server
        # logs the traceback once.
        return answer(service, request, *problem_of(request, exc))

    for kind in (*HANDLED, Exception):
        app.add_exception_handler(kind, on_error)
    app.add_exception_handler(ClientDisconnect, on_disconnect)


async def on_disconnect(request: Request, exc: Exception) -> Response:
    """A client that hung up mid-body: one log line, not a 5 KB traceback per disconnect (any
    client could flood the log with them: reliability audit 2, N14). Nobody reads the answer."""
    client = request.client.host if request.client is not None else "?"
    logger.warning(
        "%s %s: the client (%s) disconnected mid-body", request.method, request.url.path, client
    )
    return Response(status_code=400)
