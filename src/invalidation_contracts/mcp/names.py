"""The names both ends of the contract over MCP agree on: resource URIs, ``_meta`` keys, tool names.

Pure values and parsing, no SDK: the server publishes these, the client reads them.

- ``contract://versions`` — the response-level fields (``GET /contract/versions``); subscribable:
  a ``resources/updated`` notification for it means a table or the rules moved.
- ``contract://changes?since=N[&epoch=E][&tables=a,b]`` — the changes feed (a template).
- ``contract://events{?cursor,limit}`` — the same feed as MCP's Triggers & Events sketch polls
  it (``mcp.events``); subscribable: ``resources/updated`` for it carries the new cursor.
- ``contract://rules``, ``contract://graph`` — the rule declarations and the L5 graph; with
  ``?since=N[&epoch=E]`` (or the request ``_meta`` position) a worker behind N catches up first.

A request's contract position travels in its ``_meta`` (``SINCE``, ``EPOCH``: the HTTP binding's
``Contract-Since`` / ``Contract-Epoch`` headers); a result's ``_meta`` carries the contract answer
itself (``CONTRACT``, the ``meta`` envelope: the content is left to the model view), echoes
``SINCE`` when its ``table_versions`` is a delta, and carries ``SIGNATURE`` when signing was asked
for (``SIGN``).

The keys use the reverse-DNS prefix ``io.github.invalidation-contracts/`` (MCP's ``_meta`` naming
rule). The ``inline`` envelope (the wire form of 0.1: the contract in the content) uses the legacy
prefix ``invalidation-contracts/``; both ends read either (``meta_value``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import parse_qs, quote, urlsplit

from ..client.events import FetchChanges, Need
from ..protocol.problems import ProblemType, ProtocolError
from ..server.reads import ContractRead, ReadName
from ..server.tables import MAX_SAFE_INTEGER

SCHEME = "contract"
VERSIONS = "contract://versions"
CHANGES = "contract://changes"
RULES = "contract://rules"
GRAPH = "contract://graph"
#: The changes feed in the Triggers & Events shape (``mcp.events``): poll with ``?cursor=``.
EVENTS = "contract://events"
#: The RFC 6570 templates a client fills in to read a position-dependent resource.
VERSIONS_TEMPLATE = "contract://versions{?since,epoch}"
CHANGES_TEMPLATE = "contract://changes{?since,epoch,tables}"
RULES_TEMPLATE = "contract://rules{?since,epoch}"
GRAPH_TEMPLATE = "contract://graph{?since,epoch}"
EVENTS_TEMPLATE = "contract://events{?cursor,limit}"

#: The extension's identifier (reverse DNS) and the prefix of every ``_meta`` key it defines.
EXTENSION = "io.github.invalidation-contracts/contract"
PREFIX = "io.github.invalidation-contracts/"
#: The version of the extension's wire form a server advertises (docs/mcp-extension.md).
EXTENSION_VERSION = 1
#: The prefix of the ``inline`` envelope (0.1's wire form), read by both ends.
LEGACY_PREFIX = "invalidation-contracts/"
#: Result ``_meta`` (``meta`` envelope): the contract answer, as the HTTP binding's body.
CONTRACT = PREFIX + "contract"
#: Request ``_meta``: the ``contract_seq`` the client's known versions are accurate at.
SINCE = PREFIX + "since"
#: Request ``_meta``: the epoch ``SINCE`` belongs to.
EPOCH = PREFIX + "epoch"
#: Request ``_meta``: ``1`` asks for a signed freshness statement.
SIGN = PREFIX + "sign"
#: Result ``_meta``: the detached JWS over the result's structured content.
SIGNATURE = PREFIX + "signature"
#: Result ``_meta``: the validator of the answer (``mcp.conditional``), on a rejection.
VALIDATOR = PREFIX + "validator"
#: Request ``_meta``: a validator the caller holds the answer of; while it holds, the server
#: answers "not modified" (``NOT_MODIFIED`` in the result ``_meta``) instead of the answer.
IF_NONE_MATCH = PREFIX + "if-none-match"
#: Result ``_meta``: ``true`` on a not-modified answer (it carries no contract answer).
NOT_MODIFIED = PREFIX + "not-modified"
#: Notification ``_meta`` (``resources/updated`` for ``EVENTS``): the cursor of the new position.
CURSOR = PREFIX + "cursor"
#: Tool ``_meta``: the request fields the client may patch from a cached fix.
PATCHABLE = PREFIX + "patchable"
#: Tool ``_meta``: the operation (``METHOD /route``) the tool performs over HTTP.
OPERATION = PREFIX + "operation"

#: Where a tool result carries the contract: in its ``_meta`` (the model is shown the content
#: only), or in its content and structured content (0.1's form, for 0.1 clients).
META_ENVELOPE = "meta"
INLINE_ENVELOPE = "inline"
ENVELOPES = (META_ENVELOPE, INLINE_ENVELOPE)

PROBLEM_MEDIA_TYPE = "application/problem+json"
JSON_MEDIA_TYPE = "application/json"
MAX_EPOCH_LENGTH = 128
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")


@dataclass(frozen=True, slots=True)
class MetaPosition:
    """A client's contract position as MCP carries it (``_meta`` entries, a resource query): the
    seq its versions are accurate at, and their epoch. (The memory's own is ``client.Position``.)"""

    since: int | None = None
    epoch: str | None = None

    def to_meta(self, envelope: str = META_ENVELOPE) -> dict[str, Any]:
        """The request ``_meta`` entries (none without a seq), spelled for ``envelope``."""
        if self.since is None:
            return {}
        since, epoch = key_for(SINCE, envelope), key_for(EPOCH, envelope)
        return {since: self.since, **({epoch: self.epoch} if self.epoch else {})}

    def query(self) -> str:
        """``?since=N&epoch=E`` for a resource URI (empty without a seq)."""
        if self.since is None:
            return ""
        epoch = f"&epoch={quote(self.epoch, safe='')}" if self.epoch else ""
        return f"?since={self.since}{epoch}"


def extension_settings(envelope: str) -> dict[str, Any]:
    """What a server advertises under ``capabilities.extensions[EXTENSION]``."""
    return {"version": EXTENSION_VERSION, "envelope": envelope}


def legacy(key: str) -> str:
    """``key`` under the legacy prefix (the ``inline`` envelope's keys)."""
    return LEGACY_PREFIX + key.removeprefix(PREFIX)


def key_for(key: str, envelope: str) -> str:
    """The spelling of ``key`` in ``envelope``'s wire form."""
    return legacy(key) if envelope == INLINE_ENVELOPE else key


def meta_value(meta: Mapping[str, Any] | None, key: str) -> Any:
    """``meta[key]``, else the value under its legacy spelling, else None."""
    if not meta:
        return None
    if key in meta:
        return meta[key]
    return meta.get(legacy(key))


def position_of(meta: Mapping[str, Any] | None) -> MetaPosition:
    """The position a request's ``_meta`` names; ``ProtocolError`` (invalid-request) when it is
    malformed, as a malformed ``Contract-Since`` header is on HTTP."""
    if not meta:
        return MetaPosition()
    since, epoch = meta_value(meta, SINCE), meta_value(meta, EPOCH)
    if since is None:
        return MetaPosition()
    return MetaPosition(_seq(since, SINCE), _epoch(epoch, EPOCH))


def wants_signature(meta: Mapping[str, Any] | None) -> bool:
    """Whether a request's ``_meta`` asks for a signed freshness statement (``SIGN`` is 1)."""
    value = meta_value(meta, SIGN)
    return value is not None and str(value).strip() == "1"


@dataclass(frozen=True, slots=True)
class ResourceRequest:
    """A parsed ``contract://`` URI: which resource, and its query."""

    name: str
    """``versions``, ``changes``, ``rules`` or ``graph``."""
    position: MetaPosition
    tables: tuple[str, ...] | None = None

    def to_read(self, meta: MetaPosition | None = None) -> ContractRead:
        """The provider's read (``server.reads``): ``since`` is the conditional contract's seq
        (versions), the feed's start (changes) or the position to catch up to (rules, graph);
        ``meta``, the request ``_meta`` position, is a catch-up position on any read."""
        at = meta.since if meta is not None else None
        epoch = self.position.epoch or (meta.epoch if meta is not None else None)
        since = self.position.since
        if self.name in ("rules", "graph"):
            known = [seq for seq in (since, at) if seq is not None]
            since, at = None, (max(known) if known else None)
        name = cast(ReadName, self.name)
        return ContractRead(name, since=since, epoch=epoch, position=at, tables=self.tables)


def parse_resource(uri: str) -> ResourceRequest | None:
    """The contract resource ``uri`` names (None: not one); ``ProtocolError`` for a bad query."""
    parts = urlsplit(uri)
    if parts.scheme != SCHEME or parts.fragment or parts.path not in ("", "/"):
        return None
    if parts.netloc not in ("versions", "changes", "rules", "graph"):
        return None
    query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=False)
    if any(len(values) != 1 for values in query.values()):
        raise ProtocolError(ProblemType.INVALID_REQUEST, f"{uri}: each parameter at most once")
    allowed = {
        "versions": {"since", "epoch"},
        "changes": {"since", "epoch", "tables"},
        "rules": {"since", "epoch"},
        "graph": {"since", "epoch"},
    }
    unknown = set(query) - allowed.get(parts.netloc, set())
    if unknown:
        raise ProtocolError(
            ProblemType.INVALID_REQUEST, f"{uri}: unknown parameter(s) {sorted(unknown)}"
        )
    one = {name: values[0] for name, values in query.items()}
    since = _seq(one["since"], "since") if "since" in one else None
    if parts.netloc == "changes" and since is None:
        raise ProtocolError(ProblemType.INVALID_REQUEST, f"{uri}: the changes feed needs since")
    epoch = _epoch(one.get("epoch"), "epoch")
    tables = None
    if "tables" in one:
        tables = tuple(name.strip() for name in one["tables"].split(",") if name.strip())
    return ResourceRequest(parts.netloc, MetaPosition(since, epoch), tables or None)


def need_uri(need: Need, position: MetaPosition | None = None) -> str:
    """The resource a memory's need is read from: the changes feed since its position, or the
    rules listing at the client's ``position`` (a worker behind it catches up first)."""
    if isinstance(need, FetchChanges):
        return CHANGES + MetaPosition(need.since, need.epoch).query()
    return RULES + (position.query() if position is not None else "")


def tool_name(method: str, path: str) -> str:
    """The default tool name of a route: ``post_v1_subscriptions`` for ``POST /v1/subscriptions``.

    Path parameters become ``by_NAME``; anything outside ``[A-Za-z0-9_.-]`` becomes ``_``.
    """
    words = [method.lower()]
    for segment in path.strip("/").split("/"):
        if segment.startswith("{") and segment.endswith("}"):
            segment = "by_" + segment[1:-1]
        if segment:
            words.append(segment)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", "_".join(words))
    return name[:128]


def check_tool_name(name: str) -> str:
    """``name`` if MCP accepts it as a tool name (``[A-Za-z0-9_.-]{1,128}``); else ValueError."""
    if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a valid MCP tool name ([A-Za-z0-9_.-], 1-128 chars)")
    return name


def _seq(value: object, what: str) -> int:
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 16:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SAFE_INTEGER:
        raise ProtocolError(
            ProblemType.INVALID_REQUEST,
            f"{what} must be a contract seq (an integer 0..{MAX_SAFE_INTEGER}), not {value!r:.40}",
        )
    return value


def _epoch(value: object, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= MAX_EPOCH_LENGTH:
        raise ProtocolError(
            ProblemType.INVALID_REQUEST,
            f"{what} must be a string of 1..{MAX_EPOCH_LENGTH} characters",
        )
    return value
