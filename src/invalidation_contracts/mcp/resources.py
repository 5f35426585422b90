"""The contract routes as MCP resources: what ``GET /contract/...`` answers, read by URI.

``contract://versions`` (also with ``?since=&epoch=``: the conditional contract), the changes feed
``contract://changes?since=`` (a template), ``contract://rules`` and, from level 5,
``contract://graph``; the feed again as Triggers & Events pages, ``contract://events?cursor=``
(``mcp.events``, a thin mapping of the same read). A read answers the same wire object as the
HTTP route; a problem (410 resync-required, level too low, a bad query, a worker that cannot
read its registry) is the problem document, as ``application/problem+json``, so a client reads
its ``status`` as it would an HTTP status. A read runs in the event loop (the registry is in
memory); one that makes the worker catch up with other workers first (it may read a store) runs
in a worker thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from ..protocol.models import ChangesFeed, ContractFields, Problem, WireModel
from ..protocol.problems import ProblemType, ProtocolError
from ..server.reads import ContractRead, require_level
from . import events, names
from .backend import ContractBackend


@dataclass(frozen=True, slots=True)
class ResourceBody:
    """A resource read's body, and the ``since`` its ``table_versions`` are relative to."""

    body: WireModel
    since: int | None = None

    @property
    def media_type(self) -> str:
        return names.PROBLEM_MEDIA_TYPE if isinstance(self.body, Problem) else names.JSON_MEDIA_TYPE


class ContractResources:
    """The contract resources of one backend, at its provider's level."""

    def __init__(self, backend: ContractBackend, *, protect_graph: bool = False) -> None:
        """``protect_graph``: the graph is neither listed nor read (MCP has no admin identity;
        ``serve --protect-graph`` serves it to the admin token)."""
        self.backend = backend
        self.level = backend.provider.level
        self.protect_graph = protect_graph

    def resources(self) -> list[types.Resource]:
        """The fixed resources (what ``resources/list`` answers); none below level 1."""
        if not self.level.structured:
            return []
        listed = [
            types.Resource(
                uri=names.VERSIONS,
                name="contract-versions",
                title="Contract versions",
                description="The response-level contract fields: table_versions, rules_version, "
                "contract_seq, contract_epoch. Updated (resources/updated) when a table or the "
                "rules change.",
                mime_type=names.JSON_MEDIA_TYPE,
            ),
            types.Resource(
                uri=names.RULES,
                name="contract-rules",
                title="Contract rules",
                description="The rule declarations in force and their rules_version.",
                mime_type=names.JSON_MEDIA_TYPE,
            ),
        ]
        if self.level.graph and not self.protect_graph:
            listed.append(
                types.Resource(
                    uri=names.GRAPH,
                    name="contract-graph",
                    title="Contract graph",
                    description="The versioned knowledge graph (level 5): nodes table:key, edges.",
                    mime_type=names.JSON_MEDIA_TYPE,
                )
            )
        return listed

    def templates(self) -> list[types.ResourceTemplate]:
        """The position-dependent resources (``resources/templates/list``)."""
        if not self.level.structured:
            return []
        return [
            types.ResourceTemplate(
                uri_template=names.VERSIONS_TEMPLATE,
                name="contract-versions-since",
                title="Conditional contract versions",
                description="The contract fields; table_versions lists only the tables that "
                "moved after since (in epoch).",
                mime_type=names.JSON_MEDIA_TYPE,
            ),
            types.ResourceTemplate(
                uri_template=names.RULES_TEMPLATE,
                name="contract-rules-at",
                title="Contract rules at a position",
                description="The rule declarations in force, read by a worker that has reached "
                "since (in epoch): a client sends the position it knows.",
                mime_type=names.JSON_MEDIA_TYPE,
            ),
            types.ResourceTemplate(
                uri_template=names.CHANGES_TEMPLATE,
                name="contract-changes",
                title="Contract changes feed",
                description="Every row change, table transition and rule change after since; "
                "a problem document with status 410 when the log no longer covers it.",
                mime_type=names.JSON_MEDIA_TYPE,
            ),
            types.ResourceTemplate(
                uri_template=names.EVENTS_TEMPLATE,
                name="contract-events",
                title="Contract events (poll)",
                description="The changes feed as events after an opaque cursor: {events, cursor, "
                "truncated, hasMore}; at most 100 events a page; truncated means resync, then "
                "poll from cursor. Without a cursor: the current position. Subscribe to "
                "contract://events to be told of new events.",
                mime_type=names.JSON_MEDIA_TYPE,
            ),
        ]

    def read(self, uri: str, meta: Mapping[str, Any] | None = None) -> ResourceBody | None:
        """Read ``uri`` (None: not a contract resource). ``meta``: the request's ``_meta``; the
        position it names makes a worker behind the client catch up first (SPEC §8.2 rule 3),
        a malformed one is an invalid-request problem as on HTTP. Blocking when the worker is
        behind (``blocks``): then call it from a worker thread."""
        prepared = self.prepare(uri, meta)
        return prepared if not isinstance(prepared, ContractRead) else self.answer(prepared, uri)

    def prepare(
        self, uri: str, meta: Mapping[str, Any] | None
    ) -> ContractRead | ResourceBody | None:
        """The read ``uri`` asks for (no I/O); a ``ResourceBody`` already for a malformed one, None
        for a URI that is not a contract resource."""
        try:
            polled = events.parse_events(uri)
            if polled is not None:
                return _poll_read(polled, names.position_of(meta))
            request = names.parse_resource(uri)
            return None if request is None else request.to_read(names.position_of(meta))
        except ProtocolError as exc:
            return ResourceBody(exc.to_problem(instance=uri))

    def blocks(self, read: ContractRead) -> bool:
        """Whether answering ``read`` may wait on I/O: only a catch-up with other workers reads
        a store (the registry is in memory); a backend that cannot tell is assumed to."""
        behind = getattr(self.backend, "behind", None)
        return behind is None or bool(behind(read.catch_up, read.epoch))

    def answer(self, read: ContractRead, uri: str) -> ResourceBody:
        """The answer to a prepared ``read`` (a problem document for a protocol error)."""
        try:
            body = self._read(read)
        except ProtocolError as exc:
            body = ResourceBody(exc.to_problem(instance=uri))
        polled = events.parse_events(uri)  # well formed: prepare answered a malformed one
        return body if polled is None else self._page(polled, body)

    def _page(self, polled: events.EventsRequest, body: ResourceBody) -> ResourceBody:
        """A poll's answer from the read it made: the feed as a page, the current position
        without a cursor, and a resync-required problem (an old cursor, another epoch) as a
        ``truncated`` page at the current position; any other problem as it is."""
        answer = body.body
        if isinstance(answer, ChangesFeed):
            return ResourceBody(events.page(answer, polled.limit))
        if isinstance(answer, ContractFields) and answer.contract_seq is not None:
            if answer.contract_epoch:
                return ResourceBody(events.head(answer.contract_seq, answer.contract_epoch))
        if isinstance(answer, Problem) and answer.status == _GONE:
            state = self.backend.provider.registry.state
            return ResourceBody(events.truncated(state.seq, state.epoch))
        return body

    def _read(self, read: ContractRead) -> ResourceBody:
        """The one read API (``Provider.read``) at the state the client's position needs."""
        what = f"contract://{read.name}"
        require_level(self.level, read, what)
        if read.name == "graph" and self.protect_graph:
            raise ProtocolError(
                ProblemType.FORBIDDEN,
                "contract://graph is protected on this server (read it with the admin token "
                "over HTTP: GET /contract/graph)",
            )
        state = self.backend.state(read.catch_up, read.epoch)
        body = self.backend.provider.read(read, state, what=what)
        return ResourceBody(body, read.since if read.name == "versions" else None)


_GONE = 410


def _poll_read(polled: events.EventsRequest, meta: names.MetaPosition) -> ContractRead:
    """The read a poll makes: the changes feed after its cursor, or, without one, the contract
    fields (the current position); the ``_meta`` position is a catch-up position as on any read."""
    if polled.cursor is None:
        return ContractRead("versions", epoch=meta.epoch, position=meta.since)
    seq, epoch = polled.cursor
    return ContractRead("changes", since=seq, epoch=epoch, position=meta.since)
