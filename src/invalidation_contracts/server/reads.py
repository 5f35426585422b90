"""The contract's four reads, once for every transport: versions, changes, rules and graph.

A ``ContractRead`` says which read a client asked for and the position it knows; ``Provider.read``
answers it from a registry state, checking the level and applying opaque names. The HTTP routes
and the MCP resources only parse their parameters into a ``ContractRead``, fetch the state *at
``read.catch_up``* (a worker behind the client's position catches up first, SPEC §8.2 rule 3) and
call it — so what one transport honours, the other does by construction. Sans-IO: the state is
given; reading the change log is a registry read in memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from ..protocol.levels import Level
from ..protocol.models import ChangesFeed, ContractFields, GraphListing, RulesListing
from ..protocol.problems import ProblemType, ProtocolError
from .state import RegistryState

if TYPE_CHECKING:
    from .opaque import OpaqueNames
    from .registry import Registry

ReadName = Literal["versions", "changes", "rules", "graph"]
#: The level each read is served from.
LEVELS: dict[str, Level] = {
    "versions": Level.STRUCTURED,
    "changes": Level.STRUCTURED,
    "rules": Level.STRUCTURED,
    "graph": Level.SUBGRAPH,
}


@dataclass(frozen=True, slots=True)
class ContractRead:
    """One read of the contract and the client's position.

    ``since``: for ``versions`` the conditional contract's seq (only tables moved after it), for
    ``changes`` the feed's start (required). ``position``: the seq the client knows, sent on any
    read (``Contract-Since`` on HTTP, ``?since=`` or ``_meta`` on MCP) so a worker behind it
    catches up first. ``epoch``: the history both belong to. ``tables``: the feed's filter.
    """

    name: ReadName
    since: int | None = None
    epoch: str | None = None
    position: int | None = None
    tables: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.name == "changes" and self.since is None:
            raise ProtocolError(ProblemType.INVALID_REQUEST, "the changes feed needs since")

    @property
    def catch_up(self) -> int | None:
        """The position the state must have reached before this read is answered."""
        known = [seq for seq in (self.since, self.position) if seq is not None]
        return max(known) if known else None

    @property
    def what(self) -> str:
        return f"the contract's {self.name}"


ReadAnswer = ContractFields | ChangesFeed | RulesListing | GraphListing


def require_level(level: Level, read: ContractRead, what: str | None = None) -> None:
    """``ProtocolError`` (level-too-low) when ``level`` does not serve ``read``; ``what`` names
    the read as its transport spells it (``GET /contract/graph``, ``contract://graph``)."""
    needed = LEVELS[read.name]
    if level < needed:
        raise ProtocolError(
            ProblemType.LEVEL_TOO_LOW,
            f"{what or read.what} is served from level {int(needed)}; this server runs "
            f"{int(level)}",
        )


class Answerer(Protocol):
    """What a read is answered from (a ``Provider``): its level, names, registry and fields."""

    @property
    def level(self) -> Level: ...

    @property
    def opaque(self) -> OpaqueNames | None: ...

    @property
    def registry(self) -> Registry: ...

    def contract(
        self, state: RegistryState, since: int | None = None, epoch: str | None = None
    ) -> ContractFields: ...


def answer(
    provider: Answerer, read: ContractRead, state: RegistryState, what: str | None = None
) -> ReadAnswer:
    """The wire answer to ``read`` from ``state`` (the state at ``read.catch_up``)."""
    require_level(provider.level, read, what)
    opaque = provider.opaque
    if read.name == "versions":
        return provider.contract(state, read.since, read.epoch)
    if read.name == "rules":
        rules = state.rules_listing()
        return opaque.rules_listing(rules) if opaque is not None else rules
    if read.name == "graph":
        graph = state.graph_listing()
        return opaque.graph(graph) if opaque is not None else graph
    assert read.since is not None  # __post_init__
    wanted = list(read.tables) if read.tables else None
    if opaque is None:
        return provider.registry.changes(read.since, wanted, read.epoch)
    if wanted:
        wanted = opaque.tables_named(wanted, state.tables)
    return opaque.feed(provider.registry.changes(read.since, wanted or None, read.epoch))
