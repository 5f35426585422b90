"""The standalone provider service: a FastAPI app serving a domain with the contract (SPEC §3).

A thin user of the pieces in ``server.http``: the service (``ContractService``), its domain,
admin and contract routers, and app-wide problem handlers (every error of this app, routing
errors included, is an RFC 9457 problem document carrying the contract fields). To add the
contract to an existing app instead, include those routers in it (docs/providers.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Unpack

from fastapi import Depends, FastAPI, Header

from ... import __version__
from ...protocol.problems import ProblemType, ProtocolError
from ...protocol.signing import CONTRACT_SIGN
from ..config import WorkerConfig, WorkerOptions
from ..domain import Domain
from ..registry import Registry
from .errors import install_problem_handlers
from .hosts import HostCheck
from .openapi import install_openapi
from .serve import serve
from .service import ContractService
from .signing import SigningMiddleware

__all__ = ["create_app", "serve"]


def create_app(
    domain: Domain,
    config: WorkerConfig | None = None,
    *,
    registry: Registry | None = None,
    allowed_hosts: Iterable[str] | None = None,
    **options: Unpack[WorkerOptions],
) -> FastAPI:
    """The ASGI app serving ``domain`` as ``config`` says (``WorkerConfig``; keyword
    ``options`` of the same names override it, e.g. ``create_app(domain, store="r.sqlite")``).

    ``store`` persists the registry and shares it with other workers: a SQLite path or a
    ``postgresql://`` URL (opened now, closed at app shutdown), or a store (the caller closes it);
    ``database`` is the provider's database holding the domain's ``SQLTable``\\ s; ``registry``
    serves an existing in-memory registry instead; with none, a fresh in-memory registry.
    ``admin_token`` defaults to ``$INVALIDATION_CONTRACTS_ADMIN_TOKEN``; with neither, admin
    routes answer 401. ``trust`` turns on signed freshness and opaque names (docs/SPEC.md,
    "Trust extensions"). ``max_lag_s``: a worker that has not confirmed it is current for this
    long answers 503 ``registry-unavailable`` (docs/SPEC.md §8.2). ``allowed_hosts``: the
    ``Host`` names answered (``*``: any); others get 421 ``misdirected-request`` (None: no check,
    for an app behind a proxy that checks it; ``serve`` passes the loopback names by default).
    """
    config = WorkerConfig.of(config, options)
    service = ContractService.open(domain, config, registry=registry)
    try:
        domain_routes = service.domain_router()
    except BaseException:
        service.close()
        raise
    app = FastAPI(
        title=f"{domain.name} (invalidation contracts, level {int(service.level)})",
        version=__version__,
        description=domain.description or f"The {domain.name} API with invalidation contracts.",
        lifespan=service.lifespan,
        dependencies=[Depends(_check_contract_sign)] if service.signer is not None else None,
    )
    if service.signer is not None:
        app.add_middleware(SigningMiddleware, signer=service.signer)
    if allowed_hosts is not None:
        app.add_middleware(HostCheck, allowed=tuple(allowed_hosts))
    app.state.service = service
    app.state.registry = service.registry
    app.state.store = service.runtime.store
    install_problem_handlers(app, service)
    app.include_router(domain_routes)
    app.include_router(service.admin_router())
    app.include_router(service.contract_router())
    app.include_router(service.resource_router())
    install_openapi(app, domain)
    return app


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
