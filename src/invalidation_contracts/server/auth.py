"""Bearer-token check for the admin routes: constant-time comparison, a problem type per failure."""

from __future__ import annotations

import hmac
import os

from ..protocol.problems import ProblemType, ProtocolError

ADMIN_TOKEN_ENV = "INVALIDATION_CONTRACTS_ADMIN_TOKEN"
REALM = "invalidation-contracts"


class BearerAuth:
    """The admin token a server accepts; with none configured every admin call is refused (401)."""

    __slots__ = ("_token",)

    def __init__(self, token: str | None) -> None:
        self._token = token.encode("utf-8") if token else None

    @classmethod
    def from_env(cls, variable: str = ADMIN_TOKEN_ENV) -> BearerAuth:
        return cls(os.environ.get(variable))

    @property
    def configured(self) -> bool:
        return self._token is not None

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
        # Header values arrive latin-1 decoded; encoding back recovers the bytes that were sent.
        if not hmac.compare_digest(presented.encode("latin-1", "replace"), self._token):
            raise ProtocolError(
                ProblemType.FORBIDDEN,
                "the bearer token is not this server's admin token",
                headers={"WWW-Authenticate": f'Bearer realm="{REALM}", error="invalid_token"'},
            )
