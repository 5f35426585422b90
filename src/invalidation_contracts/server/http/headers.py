"""The contract's request headers: ``Contract-Since`` and ``Contract-Epoch`` (SPEC §3.1)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header
from starlette.requests import Request

CONTRACT_SINCE = "Contract-Since"
CONTRACT_EPOCH = "Contract-Epoch"
#: Longest ``Contract-Since`` read from a request an error is answered for (a safe integer).
MAX_SINCE_DIGITS = 16

ContractSince = Annotated[
    int | None,
    Header(
        alias=CONTRACT_SINCE,
        ge=0,
        description="Conditional contract: only the tables whose version moved after this seq.",
    ),
]

ContractEpoch = Annotated[
    str | None,
    Header(
        alias=CONTRACT_EPOCH,
        max_length=128,
        description=(
            "With Contract-Since: the epoch the client knows; contract_epoch is sent only if it "
            "differs."
        ),
    ),
]


def lenient_since(request: Request) -> int | None:
    """The request's ``Contract-Since`` when it is a plain non-negative integer, else None.

    Used where an error is answered and the header was not validated: only ASCII digits, and
    no more than ``MAX_SINCE_DIGITS`` of them, so no header value can make the answer fail.
    """
    value = request.headers.get(CONTRACT_SINCE, "").strip()
    if value.isascii() and value.isdigit() and len(value) <= MAX_SINCE_DIGITS:
        return int(value)
    return None


def lenient_epoch(request: Request) -> str | None:
    """The request's ``Contract-Epoch`` when it may be echoed back (bounded), else None."""
    value = request.headers.get(CONTRACT_EPOCH)
    return value if value is not None and len(value) <= 128 else None
