"""The contract over HTTP (FastAPI / Starlette), in pieces an existing app can include.

- ``ContractService.open(domain, ...)``: one worker's contract (provider, registry, follower).
- ``service.contract_router()`` and ``service.admin_router()``: ``/contract/...`` and ``/admin/...``
  (``app.include_router(router, prefix="/api")`` mounts them under a prefix).
- ``service.route_class`` / ``service.router()``: the app's own routes gain the policy check and
  the response-level contract fields.
- ``ContractSnapshot``: a handler's dependency on the reference data its request was checked
  against (read rows there, not from the database: no race with a fresh commit).
- ``service.lifespan``: start and stop following the shared history with the app.
- ``serve(app, workers=N)``: uvicorn with ``TCP_NODELAY`` on every connection.

``server.http.app.create_app`` builds a standalone app from the same pieces.
"""

from __future__ import annotations

from ..._extras import missing

# The package's one guard: every module below may import FastAPI, Starlette and uvicorn.
try:
    import fastapi  # noqa: F401
    import uvicorn  # noqa: F401
except ModuleNotFoundError as exc:
    raise missing(exc, "server") from exc

from .errors import ProblemRoute, install_problem_handlers
from .headers import CONTRACT_EPOCH, CONTRACT_SINCE
from .retrofit import ContractRoute
from .serve import listen, serve
from .service import ContractService
from .snapshot import STATE_ATTRIBUTE, ContractSnapshot, ReferenceData

__all__ = [
    "CONTRACT_EPOCH",
    "CONTRACT_SINCE",
    "ContractRoute",
    "ContractService",
    "ContractSnapshot",
    "ProblemRoute",
    "ReferenceData",
    "STATE_ATTRIBUTE",
    "install_problem_handlers",
    "listen",
    "serve",
]
