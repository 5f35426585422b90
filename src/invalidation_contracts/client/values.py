"""The values a fix memory is fed and answers with: ``Observed``, ``Answer`` and ``Position``.

Each adapter translates its own transport into these (the httpx transport from a response and its
headers, the MCP session from a tool result and its ``_meta``) and renders a ``Position`` back into
its own spelling (``Contract-Since``/``Contract-Epoch`` headers, ``_meta`` entries), so the memory
never sees a header dictionary and an adapter never parses one back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .limits import Refusal

__all__ = ["Answer", "Observed", "Position"]


@dataclass(frozen=True, slots=True)
class Observed:
    """One response as an adapter saw it: what ``observe`` reads.

    ``request``: the request as sent (None: unknown); a fix is learned only if its scope matches
    it. ``injected``: ids of the entries put into this request (new fixes record them as
    ``derived_from``). ``delta_since``: the ``Contract-Since`` the server echoed, when it did —
    then ``table_versions`` lists only tables changed after it. ``response_bytes``: the body's
    size; over ``Limits.max_body_bytes`` its contract is not read. ``contract_bytes``: the body's
    contract bytes when the caller measured them already (``protocol.wirecost``); else the memory
    measures them. ``response_id``: the server's id of the response (``x-request-id``), kept in
    the provenance of what it taught. ``signature``: the response's ``Contract-Signature``,
    checked against ``body`` as received when the trust policy has keys. ``refused``: a bound the
    body broke while the caller read it (decoding ratio, nesting depth, decoded size): the
    response is then counted, the refusal reported, and nothing of it read.
    """

    request: Mapping[str, Any] | None
    status: int
    body: Mapping[str, Any] | None
    injected: tuple[str, ...] = ()
    delta_since: int | None = None
    response_bytes: int | None = None
    contract_bytes: int | None = None
    response_id: str | None = None
    signature: str | None = None
    refused: Refusal | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    """What the server answered to a need (a changes feed, a rule listing, a 410, ...).

    ``status`` and ``body``: the answer as received (``body`` None: none, or not JSON).
    ``signature``: its ``Contract-Signature``. ``body_bytes``: its size (at least, when reading
    stopped at the cap); over ``Limits.max_feed_bytes`` it is refused unread. ``refused``: a bound
    the body broke while the adapter read it.
    """

    status: int
    body: Any = None
    signature: str | None = None
    body_bytes: int | None = None
    refused: Refusal | None = None


@dataclass(frozen=True, slots=True)
class Position:
    """Where the memory's knowledge of an origin's contract stands: the ``seq`` its versions are
    accurate at, in ``epoch``. Both None until the memory knows a valid position (or when its
    strategy keeps none); each adapter renders it in its own spelling."""

    seq: int | None = None
    epoch: str | None = None

    @property
    def known(self) -> bool:
        """Whether there is a position to send (the server then answers only what moved)."""
        return self.seq is not None
