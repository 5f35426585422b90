"""Stable problem types (RFC 9457) and the one constructor every error response goes through."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any, TypedDict, Unpack

from .models import ContractFields, Problem, RecoveryFeedback

PROBLEM_BASE = "urn:invalidation-contracts:problem:"


class ProblemType(str, Enum):  # noqa: UP042 (StrEnum would change str() of a member)
    """Every error the protocol defines, with its HTTP status and title."""

    POLICY_VIOLATION = "policy-violation"
    INVALID_REQUEST = "invalid-request"
    MALFORMED_JSON = "malformed-json"
    UNKNOWN_TABLE = "unknown-table"
    VERSION_CONFLICT = "version-conflict"
    INVALID_RULES = "invalid-rules"
    RESYNC_REQUIRED = "resync-required"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not-found"
    METHOD_NOT_ALLOWED = "method-not-allowed"
    PAYLOAD_TOO_LARGE = "payload-too-large"
    UNSUPPORTED_MEDIA_TYPE = "unsupported-media-type"
    LEVEL_TOO_LOW = "level-too-low"
    INTERNAL = "internal-error"
    REGISTRY_UNAVAILABLE = "registry-unavailable"
    MISDIRECTED_REQUEST = "misdirected-request"
    REQUEST_TIMEOUT = "request-timeout"

    @property
    def uri(self) -> str:
        return _URI[self]

    @property
    def status(self) -> int:
        return _STATUS[self]

    @property
    def title(self) -> str:  # type: ignore[override]  # the problem's title, not str.title
        return _TITLE[self]

    @classmethod
    def from_uri(cls, uri: str) -> ProblemType | None:
        if not uri.startswith(PROBLEM_BASE):
            return None
        try:
            return cls(uri[len(PROBLEM_BASE) :])
        except ValueError:
            return None


_URI = {kind: PROBLEM_BASE + kind.value for kind in ProblemType}

_STATUS = {
    ProblemType.POLICY_VIOLATION: 422,
    ProblemType.INVALID_REQUEST: 422,
    ProblemType.MALFORMED_JSON: 400,
    ProblemType.UNKNOWN_TABLE: 404,
    ProblemType.VERSION_CONFLICT: 409,
    ProblemType.INVALID_RULES: 422,
    ProblemType.RESYNC_REQUIRED: 410,
    ProblemType.UNAUTHORIZED: 401,
    ProblemType.FORBIDDEN: 403,
    ProblemType.NOT_FOUND: 404,
    ProblemType.METHOD_NOT_ALLOWED: 405,
    ProblemType.PAYLOAD_TOO_LARGE: 413,
    ProblemType.UNSUPPORTED_MEDIA_TYPE: 415,
    ProblemType.LEVEL_TOO_LOW: 404,
    ProblemType.INTERNAL: 500,
    ProblemType.REGISTRY_UNAVAILABLE: 503,
    ProblemType.MISDIRECTED_REQUEST: 421,
    ProblemType.REQUEST_TIMEOUT: 408,
}

_TITLE = {
    ProblemType.POLICY_VIOLATION: "The request violates a policy",
    ProblemType.INVALID_REQUEST: "The request body does not match the schema",
    ProblemType.MALFORMED_JSON: "The request body is not valid JSON",
    ProblemType.UNKNOWN_TABLE: "No such reference table",
    ProblemType.VERSION_CONFLICT: "The version does not move forward",
    ProblemType.INVALID_RULES: "The rule declarations are invalid",
    ProblemType.RESYNC_REQUIRED: (
        "The change log no longer covers that position; revalidate everything"
    ),
    ProblemType.UNAUTHORIZED: "A bearer token is required",
    ProblemType.FORBIDDEN: "The bearer token is not valid",
    ProblemType.NOT_FOUND: "No such resource",
    ProblemType.METHOD_NOT_ALLOWED: "Method not allowed on this resource",
    ProblemType.PAYLOAD_TOO_LARGE: "The request body is too large",
    ProblemType.UNSUPPORTED_MEDIA_TYPE: "The request body must be application/json",
    ProblemType.LEVEL_TOO_LOW: "The server's contract level does not serve this resource",
    ProblemType.INTERNAL: "Internal server error",
    ProblemType.REGISTRY_UNAVAILABLE: "The registry cannot be read; retry later",
    ProblemType.MISDIRECTED_REQUEST: "The server does not answer for this Host",
    ProblemType.REQUEST_TIMEOUT: "The request did not arrive in time",
}


def problem(
    kind: ProblemType,
    detail: str | None = None,
    *,
    contract: ContractFields | None = None,
    recovery_feedback: RecoveryFeedback | None = None,
    errors: list[dict[str, Any]] | None = None,
    instance: str | None = None,
) -> Problem:
    """Build the problem document for ``kind``, carrying the contract fields when given."""
    fields = contract.model_dump(exclude_none=True) if contract is not None else {}
    return Problem(
        type=kind.uri,
        title=kind.title,
        status=kind.status,
        detail=detail,
        instance=instance,
        recovery_feedback=recovery_feedback,
        errors=errors,
        **fields,
    )


class ProblemExtra(TypedDict, total=False):
    """What a ``ProtocolError`` carries beside its kind and detail."""

    errors: list[dict[str, Any]]
    """The problem document's ``errors`` member (which fields are wrong, and how)."""
    headers: Mapping[str, str]
    """Response headers the problem is answered with (``WWW-Authenticate``, ``Retry-After``)."""


class ProtocolError(Exception):
    """An error the protocol answers with a problem document; raised by the sans-IO cores."""

    def __init__(self, kind: ProblemType, detail: str, **extra: Unpack[ProblemExtra]) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail
        self.extra = extra

    def to_problem(self, *, instance: str | None = None) -> Problem:
        return problem(self.kind, self.detail, instance=instance, errors=self.extra.get("errors"))
