"""The provider service: a FastAPI app serving a domain's routes with the contract, plus the admin
and contract endpoints (DESIGN.md §3). A thin adapter over ``Provider`` and ``Registry``.

Every error is a problem document (``http_errors``); every problem carries the contract fields of
the state it was answered from, and each domain response takes its stamps and its suggestions from
one registry state.
"""

# ruff: noqa: E402 (the extra is checked before the third-party imports)
from __future__ import annotations

from .._extras import require_extra

require_extra("server", "fastapi", "uvicorn")

import logging
import os
import socket
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, WithJsonSchema
from pydantic.json_schema import models_json_schema
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response

from .. import __version__
from ..protocol.levels import Level
from ..protocol.models import (
    ChangesFeed,
    ContractFields,
    GraphListing,
    PatchTableRequest,
    Problem,
    ReloadRequest,
    ReloadResult,
    RulesListing,
    RulesRequest,
    RulesResult,
    SuccessResponse,
    WireModel,
)
from ..protocol.problems import ProblemType, ProtocolError, problem
from ..protocol.signing import CONTRACT_SIGN
from .auth import ADMIN_TOKEN_ENV, BearerAuth
from .domain import Domain, Route
from .faults import PolicyError
from .http_errors import (
    DEFAULT_MAX_BODY_BYTES,
    PROBLEM_MEDIA_TYPE,
    plain_status_problem,
    problem_response,
    read_json,
    read_model,
    request_validation_errors,
    status_problem_type,
)
from .provider import Provider
from .registry import Registry
from .rules import Rule
from .signing import SigningMiddleware
from .storage import DEFAULT_LOG_CAPACITY, RegistryStore, SQLiteRegistryStore, StorageError
from .tables import MAX_SAFE_INTEGER
from .trust import TrustOptions

CONTRACT_SINCE = "Contract-Since"
CONTRACT_EPOCH = "Contract-Epoch"
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
COMPONENTS = "#/components/schemas/{model}"
BODY_ERRORS = (400, 413, 415, 422)
AUTH_ERRORS = (401, 403)

logger = logging.getLogger(__name__)

# Optional parameters are published without ``null`` (WithJsonSchema): absent is fine, null is not.
_SINCE_DOC = "Conditional contract: only the tables whose version moved after this seq."
ContractSince = Annotated[
    int | None,
    Header(alias=CONTRACT_SINCE, ge=0, le=MAX_SAFE_INTEGER, description=_SINCE_DOC),
    WithJsonSchema(
        {"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER, "description": _SINCE_DOC}
    ),
]

_EPOCH_DOC = (
    "With Contract-Since: the epoch the client knows; contract_epoch is sent only if it differs."
)
ContractEpoch = Annotated[
    str | None,
    Header(alias=CONTRACT_EPOCH, max_length=128, description=_EPOCH_DOC),
    WithJsonSchema({"type": "string", "maxLength": 128, "description": _EPOCH_DOC}),
]


class Service:
    """What the routes share: the provider (domain + registry + level), auth and limits."""

    def __init__(
        self, provider: Provider, auth: BearerAuth, *, protect_graph: bool, max_body_bytes: int
    ) -> None:
        self.provider = provider
        self.registry = provider.registry
        self.level = provider.level
        self.auth = auth
        self.protect_graph = protect_graph
        self.max_body_bytes = max_body_bytes

    def contract(self, since: int | None = None, epoch: str | None = None) -> ContractFields:
        """The response-level fields of the current state at the server's level."""
        return self.provider.contract(self.registry.state, since, epoch)

    def require_level(self, level: Level, what: str) -> None:
        if self.level < level:
            raise ProtocolError(
                ProblemType.LEVEL_TOO_LOW,
                f"{what} is served from level {int(level)}; this server runs {int(self.level)}",
            )


def create_app(
    domain: Domain,
    *,
    level: Level | int | str = Level.RULES_FINGERPRINT,
    registry: Registry | None = None,
    store: str | Path | RegistryStore | None = None,
    admin_token: str | None = None,
    protect_graph: bool = False,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    log_capacity: int = DEFAULT_LOG_CAPACITY,
    trust: TrustOptions | None = None,
) -> FastAPI:
    """The ASGI app serving ``domain`` at ``level``.

    ``store`` persists the registry: a SQLite path (opened now, closed at app shutdown) or a
    ``RegistryStore`` (the caller closes it); ``registry`` serves an existing one instead; with
    neither, a fresh in-memory registry. ``admin_token`` defaults to
    ``$INVALIDATION_CONTRACTS_ADMIN_TOKEN``; with neither, admin routes answer 401. ``trust``
    turns on signed freshness and opaque names (docs/SPEC.md, "Trust extensions").
    """
    if registry is not None and store is not None:
        raise ValueError("pass either a registry or a store, not both")
    level = Level.parse(level)
    for route in domain.routes:
        if route.method.upper() not in BODY_METHODS:
            raise ValueError(
                f"route {route.path}: only {sorted(BODY_METHODS)} routes (JSON body) are served"
            )
    trust = trust if trust is not None else TrustOptions()
    signer, opaque = trust.signer(), trust.opaque()
    owned: RegistryStore | None = None
    if isinstance(store, (str, Path)):
        store = owned = SQLiteRegistryStore(store)
    if store is not None:
        try:
            registry = store.open_registry(domain, log_capacity=log_capacity)
        except BaseException:
            if owned is not None:
                owned.close()
            raise
    elif registry is None:
        registry = domain.registry(log_capacity=log_capacity)

    service = Service(
        Provider(domain, registry, level, opaque=opaque),
        BearerAuth(admin_token if admin_token is not None else os.environ.get(ADMIN_TOKEN_ENV)),
        protect_graph=protect_graph,
        max_body_bytes=max_body_bytes,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if owned is not None:
                owned.close()

    app = FastAPI(
        title=f"{domain.name} (invalidation contracts, level {int(service.level)})",
        version=__version__,
        description=domain.description or f"The {domain.name} API with invalidation contracts.",
        lifespan=lifespan,
        dependencies=[Depends(_check_contract_sign)] if signer is not None else None,
    )
    if signer is not None:
        app.add_middleware(SigningMiddleware, signer=signer)
    app.state.service = service
    app.state.registry = registry
    app.state.store = store
    _install_error_handlers(app, service)
    _add_domain_routes(app, service, domain)
    _add_admin_routes(app, service)
    _add_contract_routes(app, service)
    _install_openapi(app, domain)
    return app


def serve(
    app: FastAPI, *, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info"
) -> None:
    """Run ``app`` under uvicorn until interrupted; ``OSError`` if ``host:port`` cannot be bound."""
    import uvicorn

    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    with socket.create_server((host, port), family=family) as listener:
        uvicorn.Server(uvicorn.Config(app, log_level=log_level)).run(sockets=[listener])


# -- routes ------------------------------------------------------------------------------------


def _add_domain_routes(app: FastAPI, service: Service, domain: Domain) -> None:
    for route in domain.routes:
        app.add_api_route(
            route.path,
            _domain_endpoint(service, route),
            methods=[route.method.upper()],
            summary=route.summary or None,
            tags=[domain.name],
            responses=_responses(
                SuccessResponse,
                "The request passed every policy; the contract fields ride along.",
                *BODY_ERRORS,
            ),
            openapi_extra=_request_body(route.request_model),
            name=f"{domain.name}:{route.path}",
        )


def _domain_endpoint(service: Service, route: Route[Any]) -> Callable[..., Any]:
    async def endpoint(
        request: Request, since: ContractSince = None, epoch: ContractEpoch = None
    ) -> Response:
        payload = await read_json(request, service.max_body_bytes)
        # In a worker thread: a route's success handler may do I/O (the ledger, a payments API).
        outcome = await run_in_threadpool(
            service.provider.handle,
            route,
            payload,
            since=since,
            epoch=epoch,
            instance=request.url.path,
        )
        headers = {CONTRACT_SINCE: str(since)} if since is not None else None
        media = PROBLEM_MEDIA_TYPE if outcome.status >= 400 else "application/json"
        return Response(outcome.content, outcome.status, headers, media_type=media)

    return endpoint


def _add_admin_routes(app: FastAPI, service: Service) -> None:
    admin = [Depends(_admin_dependency(service))]
    registry = service.registry

    @app.post(
        "/admin/reload-table",
        dependencies=admin,
        tags=["admin"],
        summary="Replace a table's rows; returns the diff and the downstream nodes it affects",
        responses=_responses(
            ReloadResult,
            "The reload (a no-op when nothing changed).",
            *BODY_ERRORS,
            *AUTH_ERRORS,
            404,
            409,
        ),
        openapi_extra=_request_body(ReloadRequest),
    )
    async def reload_table(request: Request) -> Response:
        body = await read_model(request, ReloadRequest, service.max_body_bytes)
        result = await run_in_threadpool(registry.reload, body.table, body.rows, body.version)
        return _wire(result)

    @app.post(
        "/admin/patch-table",
        dependencies=admin,
        tags=["admin"],
        summary="Upsert and delete rows of a table; costs in proportion to the change",
        responses=_responses(
            ReloadResult,
            "The patch (a no-op when nothing changed).",
            *BODY_ERRORS,
            *AUTH_ERRORS,
            404,
            409,
        ),
        openapi_extra=_request_body(PatchTableRequest),
    )
    async def patch_table(request: Request) -> Response:
        body = await read_model(request, PatchTableRequest, service.max_body_bytes)
        result = await run_in_threadpool(
            registry.patch, body.table, body.upsert, body.delete, body.version
        )
        return _wire(result)

    @app.post(
        "/admin/rules",
        dependencies=admin,
        tags=["admin"],
        summary="Replace the rule declarations",
        responses=_responses(
            RulesResult,
            "The old and new rules_version and the triples that changed.",
            *BODY_ERRORS,
            *AUTH_ERRORS,
        ),
        openapi_extra=_request_body(RulesRequest),
    )
    async def set_rules(request: Request) -> Response:
        body = await read_model(request, RulesRequest, service.max_body_bytes)
        rules = [Rule.from_declaration(declaration) for declaration in body.rules]
        return _wire(await run_in_threadpool(registry.set_rules, rules))


def _add_contract_routes(app: FastAPI, service: Service) -> None:
    registry = service.registry

    @app.get(
        "/contract/versions",
        tags=["contract"],
        summary="The current response-level contract fields",
        responses=_responses(
            ContractFields, "table_versions, rules_version, contract_seq, contract_epoch.", 404, 422
        ),
    )
    async def versions(since: ContractSince = None, epoch: ContractEpoch = None) -> Response:
        service.require_level(Level.STRUCTURED, "GET /contract/versions")
        return _wire(service.contract(since, epoch), since=since)

    @app.get(
        "/contract/changes",
        tags=["contract"],
        summary="Every change after a seq, or 410 resync-required",
        responses=_responses(
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
    ) -> Response:
        service.require_level(Level.STRUCTURED, "GET /contract/changes")
        wanted = (
            None if tables is None else [name.strip() for name in tables.split(",") if name.strip()]
        )
        opaque = service.provider.opaque
        if opaque is None:
            return _wire(registry.changes(since, wanted or None, epoch))
        if wanted:
            wanted = opaque.tables_named(wanted, registry.state.tables)
        return _wire(opaque.feed(registry.changes(since, wanted or None, epoch)))

    graph_guard = (
        [Depends(_admin_dependency(service))]
        if service.protect_graph and service.level.graph
        else []
    )

    @app.get(
        "/contract/graph",
        tags=["contract"],
        dependencies=graph_guard,
        include_in_schema=service.level.graph,
        summary="The versioned knowledge graph (L5)",
        responses=_responses(
            GraphListing,
            "Nodes table:key and one edge per rule instance.",
            *(AUTH_ERRORS if graph_guard else ()),
            404,
        ),
    )
    async def graph() -> Response:
        service.require_level(Level.SUBGRAPH, "GET /contract/graph")
        listing = registry.state.graph_listing()
        opaque = service.provider.opaque
        return _wire(opaque.graph(listing) if opaque is not None else listing)

    @app.get(
        "/contract/rules",
        tags=["contract"],
        summary="The rule declarations in force",
        responses=_responses(RulesListing, "The rules and their rules_version.", 404),
    )
    async def rules() -> Response:
        service.require_level(Level.STRUCTURED, "GET /contract/rules")
        listing = registry.state.rules_listing()
        opaque = service.provider.opaque
        return _wire(opaque.rules_listing(listing) if opaque is not None else listing)


def _admin_dependency(service: Service) -> Callable[..., None]:
    bearer = HTTPBearer(
        auto_error=False, description=f"The admin token (server side: ${ADMIN_TOKEN_ENV})."
    )

    def require_admin(
        credentials: HTTPAuthorizationCredentials | None = Depends(bearer),  # noqa: B008
    ) -> None:
        service.auth.check(credentials.credentials if credentials is not None else None)

    return require_admin


def _check_contract_sign(
    sign: Annotated[
        str | None,
        Header(alias=CONTRACT_SIGN, description="`1`: sign this response (Contract-Signature)."),
    ] = None,
) -> None:
    if sign is not None and sign.strip() not in ("0", "1"):
        raise ProtocolError(
            ProblemType.INVALID_REQUEST, f"{CONTRACT_SIGN} must be 1 (sign) or 0, not {sign!r}"
        )


def _wire(body: WireModel, *, status: int = 200, since: int | None = None) -> Response:
    headers = {CONTRACT_SINCE: str(since)} if since is not None else None
    if isinstance(body, Problem):
        return problem_response(body, headers)
    return Response(
        body.to_json(), status_code=status, headers=headers, media_type="application/json"
    )


# -- errors ------------------------------------------------------------------------------------


def _install_error_handlers(app: FastAPI, service: Service) -> None:
    def answer(
        request: Request, body: Problem, headers: Mapping[str, str] | None = None
    ) -> Response:
        since = _lenient_since(request)
        epoch = request.headers.get(CONTRACT_EPOCH) if since is not None else None
        fields = service.contract(since, epoch).model_dump(exclude_none=True)
        out = dict(headers or {})
        if since is not None:
            out[CONTRACT_SINCE] = str(since)
        return problem_response(
            body.model_copy(update={"instance": body.instance or request.url.path, **fields}), out
        )

    async def on_protocol_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, ProtocolError)
        return answer(request, exc.to_problem(), exc.extra.get("headers"))

    async def on_request_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = request_validation_errors(exc.errors())
        body = problem(
            ProblemType.INVALID_REQUEST, "a query parameter or header is invalid", errors=errors
        )
        return answer(request, body)

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        kind = status_problem_type(exc.status_code)
        if kind is ProblemType.NOT_FOUND:
            body = problem(kind, f"no resource at {request.method} {request.url.path}")
        elif kind is ProblemType.METHOD_NOT_ALLOWED:
            body = problem(kind, f"{request.method} is not allowed on {request.url.path}")
        elif kind is not None:
            body = problem(kind, str(exc.detail))
        else:
            body = plain_status_problem(exc.status_code, str(exc.detail))
        return answer(request, body, exc.headers)

    async def on_storage_error(request: Request, exc: Exception) -> Response:
        logger.error("registry change not persisted: %s", exc)
        body = problem(
            ProblemType.INTERNAL, "the change could not be persisted; the registry is unchanged"
        )
        return answer(request, body)

    async def on_policy_error(request: Request, exc: Exception) -> Response:
        logger.error("%s %s: provider bug: %s", request.method, request.url.path, exc)
        return answer(
            request, problem(ProblemType.INTERNAL, "the server failed to answer this request")
        )

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        # Starlette re-raises after sending this, so the ASGI server logs the traceback once.
        return answer(
            request, problem(ProblemType.INTERNAL, "the server failed to answer this request")
        )

    app.add_exception_handler(ProtocolError, on_protocol_error)
    app.add_exception_handler(RequestValidationError, on_request_validation)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(StorageError, on_storage_error)
    app.add_exception_handler(PolicyError, on_policy_error)
    app.add_exception_handler(Exception, on_unexpected)


def _lenient_since(request: Request) -> int | None:
    """The ``Contract-Since`` an error echoes, or None unless it is a valid seq (ASCII digits)."""
    value = request.headers.get(CONTRACT_SINCE, "").strip()
    if not (value.isascii() and value.isdigit() and len(value) <= _SINCE_DIGITS):
        return None
    since = int(value)
    return since if since <= MAX_SAFE_INTEGER else None


_SINCE_DIGITS = len(str(MAX_SAFE_INTEGER))


# -- OpenAPI -----------------------------------------------------------------------------------


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": COMPONENTS.format(model=model.__name__)}


def _request_body(model: type[BaseModel]) -> dict[str, Any]:
    return {
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref(model)}}}
    }


def _responses(
    model: type[BaseModel], description: str, *problem_statuses: int
) -> dict[int | str, dict[str, Any]]:
    problem_content = {PROBLEM_MEDIA_TYPE: {"schema": _ref(Problem)}}
    out: dict[int | str, dict[str, Any]] = {
        200: {"description": description, "content": {"application/json": {"schema": _ref(model)}}}
    }
    for status in sorted({*problem_statuses, 500}):
        out[status] = {"description": _STATUS_DESCRIPTIONS[status], "content": problem_content}
    return out


_STATUS_DESCRIPTIONS = {
    400: "Malformed JSON (`malformed-json`).",
    401: "No bearer token, or none configured (`unauthorized`).",
    403: "Wrong bearer token (`forbidden`).",
    404: "Unknown table or route, or not served at this level "
    "(`unknown-table`, `not-found`, `level-too-low`).",
    409: "The version does not move forward (`version-conflict`).",
    410: "The log no longer covers `since`, or another epoch (`resync-required`).",
    413: "The body is too large (`payload-too-large`).",
    415: "The body is not application/json (`unsupported-media-type`).",
    422: "Schema mismatch or policy violation "
    "(`invalid-request`, `invalid-rules`, `policy-violation`).",
    500: "Internal error (`internal-error`); never a stack trace.",
}


def _install_openapi(app: FastAPI, domain: Domain) -> None:
    """Publish the wire models and the domain's request models under ``components/schemas``."""
    models: list[type[BaseModel]] = [
        ReloadRequest,
        PatchTableRequest,
        RulesRequest,
        ReloadResult,
        RulesResult,
        ChangesFeed,
        GraphListing,
        RulesListing,
        ContractFields,
        SuccessResponse,
        Problem,
        *(route.request_model for route in domain.routes),
    ]

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            _, defs = models_json_schema(
                [(model, "validation") for model in dict.fromkeys(models)], ref_template=COMPONENTS
            )
            document.setdefault("components", {}).setdefault("schemas", {}).update(
                defs.get("$defs", {})
            )
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
