"""Bearer-token checks: the admin token (every admin route) and the read-only metrics token (the
metrics scrape and the operator page only); constant-time comparison, a problem type per failure.
"""

from __future__ import annotations

import hmac
import os

from ..protocol.problems import ProblemType, ProtocolError

ADMIN_TOKEN_ENV = "INVALIDATION_CONTRACTS_ADMIN_TOKEN"
METRICS_TOKEN_ENV = "INVALIDATION_CONTRACTS_METRICS_TOKEN"
"""The read-only scrape credential: reads the metrics and the operator page, writes nothing."""
REALM = "invalidation-contracts"


class BearerAuth:
    """The admin token a server accepts, and optionally a read-only metrics token; with neither
    configured every admin call is refused (401)."""

    __slots__ = ("_reader", "_token")

    def __init__(self, token: str | None, reader: str | None = None) -> None:
        self._token = token.encode("utf-8") if token else None
        self._reader = reader.encode("utf-8") if reader else None
        if self._reader is not None and self._reader == self._token:
            raise ValueError("the metrics token must differ from the admin token")

    @classmethod
    def from_env(
        cls, variable: str = ADMIN_TOKEN_ENV, reader: str = METRICS_TOKEN_ENV
    ) -> BearerAuth:
        return cls(os.environ.get(variable), os.environ.get(reader))

    @property
    def configured(self) -> bool:
        return self._token is not None or self._reader is not None

    def check_read(self, presented: str | None) -> None:
        """Accept the admin token or the metrics token (a read of the metrics or the operator
        page), else raise 401/403 as ``check``."""
        if self._reader is not None and presented and _same(presented, self._reader):
            return
        if self._token is None and self._reader is not None:  # a read-only server
            if not presented:
                raise ProtocolError(
                    ProblemType.UNAUTHORIZED,
                    "send the metrics token as 'Authorization: Bearer <token>'",
                    headers={"WWW-Authenticate": f'Bearer realm="{REALM}"'},
                )
            raise ProtocolError(
                ProblemType.FORBIDDEN,
                "the bearer token is not this server's metrics token",
                headers={"WWW-Authenticate": f'Bearer realm="{REALM}", error="invalid_token"'},
            )
        self.check(presented)

    def check(self, presented: str | None) -> None:
        """Accept ``presented`` or raise 401/403.

        ``presented`` is the bearer credential as the HTTP layer decoded it (latin-1), None if
        absent.
        """
        if self._token is None:
            raise ProtocolError(
                ProblemType.UNAUTHORIZED,
                f"admin routes are disabled: the server has no admin token (set {ADMIN_TOKEN_ENV})",
                headers={"WWW-Authenticate": f'Bearer realm="{REALM}"'},
            )
        if not presented:
            raise ProtocolError(
                ProblemType.UNAUTHORIZED,
                "send the admin token as 'Authorization: Bearer <token>'",
                headers={"WWW-Authenticate": f'Bearer realm="{REALM}"'},
            )
        if self._reader is not None and _same(presented, self._reader):
            raise ProtocolError(
                ProblemType.FORBIDDEN,
                "the metrics token only reads the metrics and the operator page; "
                "this route needs the admin token",
                headers={"WWW-Authenticate": f'Bearer realm="{REALM}", error="insufficient_scope"'},
            )
        if not _same(presented, self._token):
            raise ProtocolError(
                ProblemType.FORBIDDEN,
                "the bearer token is not this server's admin token",
                headers={"WWW-Authenticate": f'Bearer realm="{REALM}", error="invalid_token"'},
            )


def _same(presented: str, token: bytes) -> bool:
    """Constant-time: header values arrive latin-1 decoded; encoding back recovers the bytes."""
    return hmac.compare_digest(presented.encode("latin-1", "replace"), token)
