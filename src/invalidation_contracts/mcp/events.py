"""The changes feed in the shape of MCP's Triggers & Events sketch: an opaque cursor, bounded
replay, and ``truncated`` meaning "resync".

Pure mapping over the feed the contract already serves (``Provider.read`` of ``changes``): a
cursor is the contract position ``(contract_seq, contract_epoch)`` spelled opaquely; a page is
the feed after it, one event per ``seq`` (``contract.changed``), at most ``limit`` of them, with
``hasMore`` and the cursor to continue from. A cursor the retained log no longer covers, or one
from another epoch, is the feed's 410 resync-required: here a page with ``truncated: true``, no
events, and the cursor of the current position to resume from after the resync.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from pydantic import Field

from ..protocol.models import ChangesFeed, RowChange, RuleChange, TableTransition, WireModel
from ..protocol.problems import ProblemType, ProtocolError
from . import names

#: The most events one page answers (a ``limit`` above it is lowered to it).
MAX_EVENTS_PER_PAGE = 100
#: The one event type: everything one registry change did, under one ``seq``.
EVENT_TYPE = "contract.changed"
_CURSOR_PREFIX = "ic1."
#: A cursor is at most this long: base64 of a seq and an epoch of up to 128 characters (UTF-8).
_MAX_CURSOR_LENGTH = 1024


class ContractChange(WireModel):
    """What one ``seq`` changed (the feed's entries under that seq)."""

    seq: int
    tables: list[TableTransition] = Field(default_factory=list)
    rows: list[RowChange] = Field(default_factory=list)
    rules: RuleChange | None = None


class ContractEvent(WireModel):
    """One event: ``eventId`` is the cursor just after it (unique, for dedup across pages)."""

    event_id: str = Field(alias="eventId")
    type: Literal["contract.changed"] = "contract.changed"
    data: ContractChange


class EventsPage(WireModel):
    """One poll's answer: the events after the cursor asked with, the cursor to poll from next,
    whether more are waiting (``hasMore``), and whether events were skipped (``truncated``:
    resync, then poll from ``cursor``)."""

    events: list[ContractEvent] = Field(default_factory=list)
    cursor: str
    truncated: bool = False
    has_more: bool = Field(default=False, alias="hasMore")


def cursor_for(seq: int, epoch: str) -> str:
    """The opaque cursor of the contract position ``seq`` in ``epoch``."""
    raw = json.dumps([seq, epoch], separators=(",", ":"), ensure_ascii=False).encode()
    return _CURSOR_PREFIX + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def position_of_cursor(cursor: str) -> tuple[int, str]:
    """The ``(seq, epoch)`` a cursor stands for; ``ProtocolError`` (invalid-request) for one this
    server did not make."""
    bad = ProtocolError(ProblemType.INVALID_REQUEST, f"cursor {cursor!r:.60} is not a cursor")
    if len(cursor) > _MAX_CURSOR_LENGTH or not cursor.startswith(_CURSOR_PREFIX):
        raise bad
    body = cursor.removeprefix(_CURSOR_PREFIX)
    try:
        value = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (binascii.Error, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise bad from exc
    match value:
        case [int() as seq, str() as epoch] if 0 <= seq and 0 < len(epoch) <= 128:
            return seq, epoch
    raise bad


@dataclass(frozen=True, slots=True)
class EventsRequest:
    """A parsed ``contract://events`` URI: the cursor to poll from (None: start at the current
    position) and the most events to answer."""

    cursor: tuple[int, str] | None = None
    limit: int = MAX_EVENTS_PER_PAGE


def parse_events(uri: str) -> EventsRequest | None:
    """The poll ``uri`` asks for (None: not ``contract://events``); ``ProtocolError`` for a bad
    query (an unknown parameter, a malformed cursor, a limit below 1)."""
    parts = urlsplit(uri)
    if parts.scheme != names.SCHEME or parts.netloc != "events" or parts.path not in ("", "/"):
        return None
    query = parse_qs(parts.query, keep_blank_values=True)
    if set(query) - {"cursor", "limit"} or any(len(v) != 1 for v in query.values()):
        raise ProtocolError(
            ProblemType.INVALID_REQUEST, f"{uri:.120}: takes cursor and limit, each at most once"
        )
    cursor = position_of_cursor(query["cursor"][0]) if "cursor" in query else None
    limit = MAX_EVENTS_PER_PAGE
    if "limit" in query:
        text = query["limit"][0]
        if not (text.isascii() and text.isdigit() and 0 < len(text) <= 6 and int(text) >= 1):
            raise ProtocolError(ProblemType.INVALID_REQUEST, "limit must be an integer from 1")
        limit = min(int(text), MAX_EVENTS_PER_PAGE)
    return EventsRequest(cursor, limit)


def page(feed: ChangesFeed, limit: int = MAX_EVENTS_PER_PAGE) -> EventsPage:
    """The feed as at most ``limit`` events; past them, ``hasMore`` and the cursor of the last
    one answered, else the cursor of the feed's ``last_seq``."""
    changes: dict[int, dict[str, Any]] = {}
    for transition in feed.tables:
        changes.setdefault(transition.seq, {"tables": [], "rows": []})["tables"].append(transition)
    for row in feed.rows:
        changes.setdefault(row.seq, {"tables": [], "rows": []})["rows"].append(row)
    for rule in feed.rules:
        changes.setdefault(rule.seq, {"tables": [], "rows": []})["rules"] = rule
    seqs = sorted(changes)
    more = len(seqs) > limit
    seqs = seqs[:limit]
    epoch = feed.contract_epoch
    events = [
        ContractEvent(event_id=cursor_for(seq, epoch), data=ContractChange(seq=seq, **changes[seq]))
        for seq in seqs
    ]
    end = seqs[-1] if more else feed.last_seq
    return EventsPage(events=events, cursor=cursor_for(end, epoch), has_more=more)


def truncated(seq: int, epoch: str) -> EventsPage:
    """The answer to a cursor the log cannot serve: no events, resync, then poll from the
    current position ``seq`` in ``epoch``."""
    return EventsPage(cursor=cursor_for(seq, epoch), truncated=True)


def head(seq: int, epoch: str) -> EventsPage:
    """The answer to a poll without a cursor: no events, the cursor of the current position."""
    return EventsPage(cursor=cursor_for(seq, epoch))
