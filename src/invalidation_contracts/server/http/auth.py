"""The admin-token dependency of the admin routes (and, optionally, of the graph)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..auth import ADMIN_TOKEN_ENV

if TYPE_CHECKING:
    from .service import ContractService


def admin_dependency(service: ContractService) -> Callable[..., None]:
    """A dependency that lets a request through only with the service's admin token."""
    bearer = HTTPBearer(
        auto_error=False, description=f"The admin token (server side: ${ADMIN_TOKEN_ENV})."
    )

    def require_admin(
        credentials: HTTPAuthorizationCredentials | None = Depends(bearer),  # noqa: B008
    ) -> None:
        service.auth.check(credentials.credentials if credentials is not None else None)

    return require_admin
