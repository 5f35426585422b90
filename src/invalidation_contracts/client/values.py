"""The values a fix memory is fed and answers with: ``Observed``, ``Answer`` and ``Position``.

Each adapter translates its own transport into these (the httpx transport from a response and its
headers, the MCP session from a tool result and its ``_meta``) and renders a ``Position`` back into
its own spelling (``Contract-Since``/``Contract-Epoch`` headers, ``_meta`` entries), so the memory
never sees a header dictionary and an adapter never parses one back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..protocol.models import ChangesFeed, RulesListing
from ..protocol.signing import Binding
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
    cites: Mapping[int, tuple[str, ...]] = field(default_factory=dict)
    """The resources each suggestion (by index) cites: the paths of the response's ``Link``
    headers of relation ``related`` anchored at it (``protocol.links.citations``)."""
    binding: Binding | None = None
    """The request sent, as a signed statement binds it (``METHOD /path`` and ``Host``, or
    ``tools/call NAME``): a statement bound to another request is refused (None: not checked)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What the server answered to a need: the one value ``answer(need, ...)`` is fed.

    ``status`` and ``body``: the answer as received (``body`` None: none, or not JSON; ``status``
    None: no usable answer came, see ``unusable``). ``signature``: its ``Contract-Signature``.
    ``body_bytes``: its size (at least, when reading stopped at the cap); over
    ``Limits.max_feed_bytes`` it is refused unread. ``refused``: a bound the body broke while the
    adapter read it. An adapter that has already parsed what it read names the case instead:
    ``changes``, ``rules``, ``resync`` or ``unusable``.
    """

    status: int | None
    body: object = None
    signature: str | None = None
    body_bytes: int | None = None
    refused: Refusal | None = None
    etag: str | None = None
    """The answer's ``ETag`` (a resource read, ``ReadResource``)."""

    @classmethod
    def changes(
        cls, feed: ChangesFeed | Mapping[str, Any], *, signature: str | None = None
    ) -> Answer:
        """A changes feed was fetched (200). Pass the body as received (a mapping) when it is
        signed: the signature covers those bytes. A feed over ``limits.max_feed_items`` is not
        read: it is treated as lost history."""
        body = feed.to_wire() if isinstance(feed, ChangesFeed) else feed
        return cls(200, body, signature=signature)

    @classmethod
    def rules(
        cls, listing: RulesListing | Mapping[str, Any], *, signature: str | None = None
    ) -> Answer:
        """A rule listing was fetched (200); as received (a mapping) when it is signed."""
        body = listing.to_wire() if isinstance(listing, RulesListing) else listing
        return cls(200, body, signature=signature)

    @classmethod
    def resync(
        cls, problem: Mapping[str, Any] | None = None, *, signature: str | None = None
    ) -> Answer:
        """The server answered 410 resync-required: all the origin's entries are evicted (reason
        resync). ``problem`` and ``signature``: the 410 body and its ``Contract-Signature``,
        checked when the trust policy has keys."""
        return cls(410, problem, signature=signature)

    @classmethod
    def unusable(cls) -> Answer:
        """The need got no usable answer (not served, or not understood): the memory falls back
        conservatively. No changes feed: entries on moved tables are evicted at table
        granularity; no rule listing: rule-dependent entries under the old stamp are evicted.
        (A network error is not this: report it with ``fetch_failed``, the need stays
        outstanding.)"""
        return cls(None)


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
