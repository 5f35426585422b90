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

from ..._extras import require_extra

require_extra("server", "fastapi", "uvicorn")

from .errors import ProblemRoute, install_problem_handlers  # noqa: E402
from .headers import CONTRACT_EPOCH, CONTRACT_SINCE  # noqa: E402
from .retrofit import ContractRoute  # noqa: E402
from .serve import listen, serve  # noqa: E402
from .service import ContractService  # noqa: E402
from .snapshot import STATE_ATTRIBUTE, ContractSnapshot, ReferenceData  # noqa: E402

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
