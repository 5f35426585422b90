"""The admin-token dependency of the admin routes (and, optionally, of the graph), and the
reader dependency of the metrics scrape (the admin token or the read-only metrics token)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..auth import ADMIN_TOKEN_ENV, METRICS_TOKEN_ENV

if TYPE_CHECKING:
    from ..auth import BearerAuth


class Guarded(Protocol):
    """What the admin dependency needs: the worker's bearer-token check."""

    @property
    def auth(self) -> BearerAuth: ...


def admin_dependency(service: Guarded) -> Callable[..., None]:
    """A dependency that lets a request through only with the service's admin token."""
    bearer = HTTPBearer(
        auto_error=False, description=f"The admin token (server side: ${ADMIN_TOKEN_ENV})."
    )

    def require_admin(
        credentials: HTTPAuthorizationCredentials | None = Depends(bearer),  # noqa: B008
    ) -> None:
        service.auth.check(credentials.credentials if credentials is not None else None)

    return require_admin


def reader_dependency(service: Guarded) -> Callable[..., None]:
    """A dependency for the read-only routes (the metrics scrape): the admin token or the
    metrics token."""
    bearer = HTTPBearer(
        auto_error=False,
        description=f"The admin token or the read-only metrics token (${METRICS_TOKEN_ENV}).",
    )

    def require_reader(
        credentials: HTTPAuthorizationCredentials | None = Depends(bearer),  # noqa: B008
    ) -> None:
        service.auth.check_read(credentials.credentials if credentials is not None else None)

    return require_reader
