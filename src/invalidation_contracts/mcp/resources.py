"""The contract routes as MCP resources: what ``GET /contract/...`` answers, read by URI.

``contract://versions`` (also with ``?since=&epoch=``: the conditional contract), the changes feed
``contract://changes?since=`` (a template), ``contract://rules`` and, from level 5,
``contract://graph``. A read answers the same wire object as the HTTP route; a problem (410
resync-required, level too low, a bad query, a worker that cannot read its registry) is the
problem document, as ``application/problem+json``, so a client reads its ``status`` as it would
an HTTP status. The reads run in a worker thread: catching up with other workers may read a store.
"""

from __future__ import annotations

from dataclasses import dataclass

import mcp_types as types

from ..protocol.levels import Level
from ..protocol.models import Problem, WireModel
from ..protocol.problems import ProblemType, ProtocolError
from . import names
from .source import ContractSource


@dataclass(frozen=True, slots=True)
class Answer:
    """A resource read's body, and the ``since`` its ``table_versions`` are relative to."""

    body: WireModel
    since: int | None = None

    @property
    def media_type(self) -> str:
        return names.PROBLEM_MEDIA_TYPE if isinstance(self.body, Problem) else names.JSON_MEDIA_TYPE


class ContractResources:
    """The contract resources of one source, at its provider's level."""

    def __init__(self, source: ContractSource, *, protect_graph: bool = False) -> None:
        """``protect_graph``: the graph is neither listed nor read (MCP has no admin identity;
        ``serve --protect-graph`` serves it to the admin token)."""
        self.source = source
        self.level = source.provider.level
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
                uri_template=names.CHANGES_TEMPLATE,
                name="contract-changes",
                title="Contract changes feed",
                description="Every row change, table transition and rule change after since; "
                "a problem document with status 410 when the log no longer covers it.",
                mime_type=names.JSON_MEDIA_TYPE,
            ),
        ]

    def read(self, uri: str) -> Answer | None:
        """Read ``uri`` (None: not a contract resource). Blocking: call from a worker thread."""
        try:
            request = names.parse_resource(uri)
            if request is None:
                return None
            return self._read(request)
        except ProtocolError as exc:
            return Answer(exc.to_problem(instance=uri))

    def _read(self, request: names.ResourceRequest) -> Answer:
        source, provider = self.source, self.source.provider
        since, epoch = request.position.since, request.position.epoch
        opaque = provider.opaque
        if request.name == "graph":
            self._require(Level.SUBGRAPH, "contract://graph")
            if self.protect_graph:
                raise ProtocolError(
                    ProblemType.FORBIDDEN,
                    "contract://graph is protected on this server (read it with the admin token "
                    "over HTTP: GET /contract/graph)",
                )
            listing = source.state().graph_listing()
            return Answer(opaque.graph(listing) if opaque is not None else listing)
        self._require(Level.STRUCTURED, f"contract://{request.name}")
        if request.name == "rules":
            rules = source.state().rules_listing()
            return Answer(opaque.rules_listing(rules) if opaque is not None else rules)
        state = source.state(since, epoch)
        if request.name == "versions":
            return Answer(provider.contract(state, since, epoch), since)
        assert since is not None  # parse_resource requires it for the feed
        wanted = list(request.tables) if request.tables else None
        if opaque is None:
            return Answer(provider.registry.changes(since, wanted, epoch))
        if wanted:
            wanted = opaque.tables_named(wanted, state.tables)
        return Answer(opaque.feed(provider.registry.changes(since, wanted or None, epoch)))

    def _require(self, level: Level, what: str) -> None:
        if self.level < level:
            raise ProtocolError(
                ProblemType.LEVEL_TOO_LOW,
                f"{what} is served from level {int(level)}; this server runs {int(self.level)}",
            )
