"""The contract's request headers: ``Contract-Since`` and ``Contract-Epoch`` (SPEC §3.1)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from fastapi import Header
from pydantic import BeforeValidator, WithJsonSchema
from starlette.requests import Request

from ...protocol.headers import CONTRACT_EPOCH, CONTRACT_PATCHABLE, CONTRACT_SINCE
from ...protocol.position import MAX_EPOCH_LENGTH, parse_seq
from ...protocol.problems import ProblemType, ProtocolError
from ..tables import MAX_SAFE_INTEGER

__all__ = [
    "CONTRACT_EPOCH",
    "CONTRACT_PATCHABLE",
    "CONTRACT_SINCE",
    "ContractEpoch",
    "ContractPosition",
    "ContractSince",
]
#: What a ``Contract-Epoch`` header may hold: visible ASCII (empty: the 410 of SPEC §8.1).
EPOCH_HEADER_PATTERN = r"^[\x21-\x7e]*$"


def _digits(value: object) -> object:
    """A ``Contract-Since`` must be ASCII digits (SPEC §3.1): no sign, point, space or exponent,
    which pydantic's lax integer parsing would take."""
    if isinstance(value, str) and parse_seq(value) is None:
        raise ValueError("must be ASCII digits, from 0 to 2^53-1")
    return value


def _seq_header(description: str) -> tuple[Any, ...]:
    """What a ``Contract-Since`` parameter is annotated with: ASCII digits from 0 to 2^53-1,
    documented by ``description``, published without ``null`` (absent is fine, null is not)."""
    schema = {"type": "integer", "minimum": 0, "maximum": MAX_SAFE_INTEGER}
    return (
        BeforeValidator(_digits),
        Header(alias=CONTRACT_SINCE, ge=0, le=MAX_SAFE_INTEGER, description=description),
        WithJsonSchema({**schema, "description": description}),
    )


# Optional parameters are published without ``null`` (WithJsonSchema): absent is fine, null is not.
_SINCE_DOC = "Conditional contract: only the tables whose version moved after this seq."
ContractSince = Annotated[int | None, *_seq_header(_SINCE_DOC)]

_POSITION_DOC = (
    "The position the client knows (its contract_seq): a worker behind it catches up with the "
    "shared history before answering, so a client moving between workers never goes back."
)
ContractPosition = Annotated[int | None, *_seq_header(_POSITION_DOC)]
"""``Contract-Since`` on the contract's read routes: a catch-up position, not a delta (§8.2)."""

_EPOCH_DOC = (
    "With Contract-Since: the epoch the client knows; contract_epoch is sent only if it differs."
)
ContractEpoch = Annotated[
    str | None,
    Header(
        alias=CONTRACT_EPOCH,
        max_length=MAX_EPOCH_LENGTH,
        pattern=EPOCH_HEADER_PATTERN,
        description=_EPOCH_DOC,
    ),
    WithJsonSchema(
        {
            "type": "string",
            "maxLength": MAX_EPOCH_LENGTH,
            "pattern": EPOCH_HEADER_PATTERN,
            "description": _EPOCH_DOC,
        }
    ),
]


def lenient_since(request: Request) -> int | None:
    """The ``Contract-Since`` an error echoes, or None unless it is a valid seq (ASCII digits).

    Used where the header was not validated: no header value can make an answer fail.
    """
    return parse_seq(request.headers.get(CONTRACT_SINCE, "").strip())


def strict_since(request: Request) -> int | None:
    """The request's ``Contract-Since``, or None when absent; 422 ``invalid-request`` when it is
    not ASCII digits from 0 to 2^53-1 (SPEC §3.1), as on every contract route."""
    return _strict_since(request.headers.get(CONTRACT_SINCE))


def strict_epoch(request: Request) -> str | None:
    """The request's ``Contract-Epoch``, or None when absent; 422 when too long or not visible
    ASCII."""
    return _strict_epoch(request.headers.get(CONTRACT_EPOCH))


def strict_position(scope: Any) -> tuple[int | None, str | None]:
    """``(strict_since, strict_epoch)`` of a request, read from its ASGI scope in one pass.

    What the two give for the same request (the first of repeated headers, Latin-1 values, the
    ``Contract-Since`` error first), without building and searching Starlette's ``Headers``
    twice: a retrofitted app pays this on every request of its own routes.
    """
    return position_of(first_headers(scope, POSITION_HEADERS))


def position_of(found: dict[bytes, bytes]) -> tuple[int | None, str | None]:
    """``strict_position`` of the headers ``first_headers`` found (``POSITION_HEADERS`` among
    the names it looked for): a caller that needs other headers too reads them in the same pass.
    """
    since, epoch = found.get(_SINCE_KEY), found.get(_EPOCH_KEY)
    return (
        _strict_since(None if since is None else since.decode("latin-1")),
        _strict_epoch(None if epoch is None else epoch.decode("latin-1")),
    )


def first_headers(scope: Any, names: frozenset[bytes]) -> dict[bytes, bytes]:
    """The first value of each header of ``names`` (lower-case bytes) the request carries, as
    ``request.headers.get`` finds it (ASGI header names are lower-case)."""
    found: dict[bytes, bytes] = {}
    for key, value in scope["headers"]:
        if key in names and key not in found:
            found[key] = value
    return found


_SINCE_KEY = CONTRACT_SINCE.lower().encode("latin-1")
_EPOCH_KEY = CONTRACT_EPOCH.lower().encode("latin-1")
POSITION_HEADERS = frozenset((_SINCE_KEY, _EPOCH_KEY))
_EPOCH_VALUE = re.compile(EPOCH_HEADER_PATTERN)


def _strict_since(raw: str | None) -> int | None:
    if raw is None:
        return None
    value = parse_seq(raw.strip())
    if value is None:
        raise _invalid_header(CONTRACT_SINCE, "must be ASCII digits, from 0 to 2^53-1")
    return value


def _strict_epoch(value: str | None) -> str | None:
    if value is None:
        return None
    if len(value) > MAX_EPOCH_LENGTH or not _EPOCH_VALUE.fullmatch(value):
        raise _invalid_header(
            CONTRACT_EPOCH, f"must be at most {MAX_EPOCH_LENGTH} visible ASCII characters"
        )
    return value


def _invalid_header(name: str, message: str) -> ProtocolError:
    errors: list[dict[str, Any]] = [
        {"loc": ["header", name], "msg": message, "type": "value_error"}
    ]
    return ProtocolError(
        ProblemType.INVALID_REQUEST, "a query parameter or header is invalid", errors=errors
    )


def lenient_epoch(request: Request) -> str | None:
    """The request's ``Contract-Epoch`` when it may be echoed back (bounded), else None."""
    value = request.headers.get(CONTRACT_EPOCH)
    return value if value is not None and len(value) <= MAX_EPOCH_LENGTH else None
