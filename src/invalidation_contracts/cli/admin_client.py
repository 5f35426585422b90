"""The operator's client for a running provider (``invalidation-contracts reload`` / ``graph``).

Every failure becomes one ``AdminClientError``: a single line an operator can act on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self, TypeVar

from pydantic import ValidationError

from .._extras import missing
from ..protocol.models import GraphListing, Problem, ReloadRequest, ReloadResult, WireModel
from ..protocol.problems import ProblemType
from ..server.auth import ADMIN_TOKEN_ENV

try:
    import httpx
except ModuleNotFoundError as exc:
    raise missing(exc, "cli") from exc

W = TypeVar("W", bound=WireModel)


class AdminClientError(Exception):
    """A request to the provider failed; ``str()`` is a one-line explanation."""

    def __init__(
        self, message: str, *, status: int | None = None, problem: Problem | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.problem = problem


class AdminClient:
    """Synchronous calls to a provider's admin and contract endpoints."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        if token and not all("!" <= ch <= "~" for ch in token):
            # Never echoed: it is a secret, and httpx would quote it in its error.
            raise AdminClientError("the admin token holds characters an HTTP header cannot carry")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            self._client = httpx.Client(
                base_url=self.url, headers=headers, timeout=timeout, transport=transport
            )
        except (httpx.InvalidURL, ValueError) as exc:
            raise AdminClientError(f"{url!r} is not a usable URL: {exc}") from None

    def reload(
        self, table: str, rows: Mapping[str, Any], version: str | None = None
    ) -> ReloadResult:
        """``POST /admin/reload-table``: replace ``table``'s rows."""
        body = ReloadRequest(table=table, rows=dict(rows), version=version).to_wire()
        return self._call("POST", "/admin/reload-table", ReloadResult, json=body)

    def graph(self) -> GraphListing:
        """``GET /contract/graph``: the versioned knowledge graph."""
        return self._call("GET", "/contract/graph", GraphListing)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, model: type[W], **kwargs: Any) -> W:
        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.ConnectError:
            raise AdminClientError(f"cannot reach {self.url}: is the server running?") from None
        except httpx.TimeoutException:
            raise AdminClientError(f"{self.url} did not answer in time") from None
        except httpx.HTTPError as exc:
            raise AdminClientError(f"request to {self.url}{path} failed: {exc}") from None
        if response.is_success:
            try:
                return model.model_validate(response.json())
            except (ValueError, ValidationError):
                raise AdminClientError(
                    f"{self.url}{path} answered {response.status_code} without a {model.__name__}",
                    status=response.status_code,
                ) from None
        raise self._failure(path, response)

    def _failure(self, path: str, response: httpx.Response) -> AdminClientError:
        try:
            doc = Problem.model_validate(response.json())
        except (ValueError, ValidationError):
            return AdminClientError(
                f"{self.url}{path} answered {response.status_code} {response.reason_phrase}",
                status=response.status_code,
            )
        kind = ProblemType.from_uri(doc.type)
        detail = doc.detail or doc.title
        if kind is ProblemType.UNAUTHORIZED:
            message = (
                f"not authorised: {detail} (set ${ADMIN_TOKEN_ENV} or pass --admin-token-file)"
            )
        elif kind is ProblemType.FORBIDDEN:
            message = f"the admin token was rejected: {detail}"
        else:
            name = kind.value if kind is not None else doc.type
            message = f"{self.url}{path} answered {doc.status} {name}: {detail}"
        return AdminClientError(message, status=doc.status, problem=doc)
