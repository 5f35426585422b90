"""The contract fold: what a client knows of one origin's contract, folded from what it was sent.

Pure bookkeeping over an ``OriginState``: full and delta ``table_versions`` (the conditional
contract, SPEC §3.1), the position (``contract_seq`` within ``contract_epoch``), the rules stamp
and the transitions of a changes feed. The fold says what moved; what a move does to the entries
is the strategies' business. The fix memory and the wire-cost study's conformance check (can a
client rebuild every full contract from a trimmed stream?) run this one fold.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..protocol.models import ChangesFeed, ContractFields
from .entries import later
from .state import OriginState

#: A table's version move: ``(old_version, new_version)``; ``new_version`` None: the table is gone.
Move = tuple[str, str | None]


@dataclass(frozen=True, slots=True)
class StampReading:
    """What one response's contract fields moved."""

    moves: dict[str, Move] = field(default_factory=dict)
    """Tables the state knew at another version, or did not know (old ``""``, listed in
    ``first_seen``), in table order; then tables a full dictionary no longer lists."""
    first_seen: frozenset[str] = frozenset()
    """Tables the state did not know before this response."""
    seq: int | None = None
    trusted: bool = False
    """Whether the versions are complete at ``seq``, so the position may advance to it."""


@dataclass(frozen=True, slots=True)
class FeedReading:
    """What a changes feed moved beyond what the state knew."""

    moves: tuple[tuple[str, str, str], ...] = ()
    """``(table, old, new)`` for every table the state knew at another version."""
    rules_version: str | None = None
    """The rules version the feed ends at, if a rule changed after the state's position."""


class ContractFold:
    """Folds contract fields and changes feeds into an ``OriginState``."""

    def __init__(self, state: OriginState) -> None:
        self.state = state

    def epoch_moved(self, epoch: str | None) -> str | None:
        """The epoch the state is in, when ``epoch`` names another history; else None."""
        old = self.state.epoch
        return old if epoch is not None and old is not None and epoch != old else None

    def behind(self, contract: ContractFields, delta_since: int | None) -> bool:
        """Whether the server's head is behind the position it was sent, in the state's epoch.

        The server echoed ``Contract-Since: delta_since`` yet answered at a lower
        ``contract_seq``: its history does not reach a position it once served (a restore). An
        older response to a concurrent request is not this: its echo is its own, lower, position.
        Like a 410, this is a resync (SPEC §3.1).
        """
        seq, epoch = contract.contract_seq, contract.contract_epoch
        same_epoch = epoch is None or epoch == self.state.epoch
        return (
            self.state.known_seq is not None
            and delta_since is not None
            and seq is not None
            and seq < delta_since
            and same_epoch
        )

    def read(self, contract: ContractFields, delta_since: int | None) -> StampReading | None:
        """Fold one response's fields; None when it is older than the state's position.

        ``delta_since``: the ``Contract-Since`` the server echoed. Its ``table_versions`` then
        lists only the tables changed after it (absent: none changed); otherwise the dictionary
        is complete and a table it leaves out is gone.
        """
        st = self.state
        if contract.contract_epoch is not None:
            st.epoch = contract.contract_epoch
        seq = contract.contract_seq
        if seq is not None and st.known_seq is not None and seq < st.known_seq:
            return None
        versions = contract.table_versions
        if versions is None and delta_since is not None:
            versions = {}  # a conditional answer leaves out an empty delta
        if versions is None:
            return StampReading(seq=seq)
        full = delta_since is None
        trusted = full or (
            st.known_seq is not None and delta_since is not None and delta_since <= st.known_seq
        )
        moves: dict[str, Move] = {}
        first: set[str] = set()
        for table in sorted(versions):
            version = versions[table]
            old = st.known.get(table)
            if old == version:
                continue
            st.known[table] = version
            moves[table] = (old or "", version)
            if old is None:
                first.add(table)
        if full:
            for table in sorted(set(st.known) - set(versions)):
                moves[table] = (st.known.pop(table), None)
        return StampReading(moves, frozenset(first), seq, trusted)

    def rules(self, version: str) -> str | None:
        """Fold a ``rules_version`` stamp; the one it replaced, if it moved."""
        old = self.state.rules_version
        self.state.rules_version = version
        return old if old is not None and old != version else None

    def advance(self, reading: StampReading, *, settled: bool) -> None:
        """Move the position to the reading's seq; ``settled``: nothing awaits a fetch."""
        if reading.seq is None or not reading.trusted:
            return
        st = self.state
        st.known_seq = later(st.known_seq, reading.seq)
        if settled:
            st.synced_seq = later(st.synced_seq, reading.seq)

    def merge_feed(self, feed: ChangesFeed) -> FeedReading:
        """Bring the known versions to ``feed.last_seq`` (transitions after the position only)."""
        st = self.state
        base = st.known_seq
        moves = []
        for tr in sorted(feed.tables, key=lambda t: t.seq):
            if base is not None and tr.seq <= base:
                continue
            old = st.known.get(tr.table)
            if old != tr.new_version:
                if old is not None:
                    moves.append((tr.table, old, tr.new_version))
                st.known[tr.table] = tr.new_version
        rules = [
            rc for rc in sorted(feed.rules, key=lambda r: r.seq) if base is None or rc.seq > base
        ]
        st.known_seq = later(base, feed.last_seq)
        return FeedReading(tuple(moves), rules[-1].new_rules_version if rules else None)
