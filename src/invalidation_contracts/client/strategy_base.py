"""The strategy interface and the two arms every other builds on: no memory, naive memory.

``Strategy`` is the hooks the memory calls (each a no-op here); ``NoMemory`` (A0) keeps nothing,
``NaiveMemory`` (A1) keeps everything. The contract arms (``client.strategies``) and the
contract-less policies (``client.contractless``) extend them, so both import this module and
neither imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from ..protocol.models import ChangesFeed, RulesListing, Suggestion
from .entries import MemoryEntry
from .shared.ledger import Ledger
from .state import OriginState

#: A table's version move: ``(old_version, new_version)``; ``new_version`` None: the table is gone.
Move = tuple[str, str | None]


class Strategy:
    """Base of every arm: the hooks the memory calls, each a no-op here."""

    name: ClassVar[str] = ""
    arm: ClassVar[str] = ""
    stores: ClassVar[bool] = True
    """Whether it keeps fixes at all (A0 does not)."""
    invalidates: ClassVar[bool] = True
    """Whether it reads the contract at all (A0 and A1 do not)."""
    reads_rules: ClassVar[bool] = False
    """Whether it acts on the ``rules_version`` stamp."""
    cascades: ClassVar[bool] = False
    """Whether evicting a stale entry also evicts entries derived from it."""
    replaces: ClassVar[bool] = True
    """Whether a newer fix for a key supersedes the entry it has (every shipped arm does)."""
    reads_unhinted: ClassVar[bool] = False
    """Whether a suggestion without a ``cache_hint`` (a server with no contract) is kept: the
    contract-less policies (``client.contractless``) do."""

    def serves(self, tx: Ledger, entry: MemoryEntry) -> bool:
        """Whether a lookup may serve this matching entry now (a contract-less policy's doubt)."""
        return True

    def on_stored(self, tx: Ledger, entry: MemoryEntry) -> None:
        """An entry was stored."""

    def on_refuted(self, tx: Ledger, entry: MemoryEntry) -> None:
        """The server taught another value for the entry's key: its fix changed."""

    def on_confirmed(self, tx: Ledger, entry: MemoryEntry) -> None:
        """The server taught the entry's fix again: it is still good."""

    def on_accepted(self, tx: Ledger, entry: MemoryEntry) -> None:
        """The server accepted a request the entry was injected into."""

    def on_table_moves(self, tx: Ledger, moves: Mapping[str, Move]) -> None:
        """Stamps showed tables whose version moved."""

    def on_changes(self, tx: Ledger, feed: ChangesFeed) -> None:
        """The changes feed arrived (its transitions are already merged into the known versions)."""

    def on_changes_unavailable(self, tx: Ledger) -> None:
        """The changes feed could not be had (not served, or not understood)."""

    def on_rules_moved(self, tx: Ledger, old: str, new: str) -> None:
        """The ``rules_version`` stamp moved."""

    def on_rules_listing(self, tx: Ledger, listing: RulesListing) -> None:
        """The rule declarations now in force arrived."""

    def on_rules_unavailable(self, tx: Ledger) -> None:
        """The rule declarations could not be had."""

    def on_failure(self, tx: Ledger, suggestions: Sequence[Suggestion]) -> None:
        """A policy failure arrived, before its suggestions are stored."""

    def wants_changes(self, tx: Ledger) -> bool:
        return False

    def wants_rules(self, tx: Ledger) -> bool:
        return False

    def withholds(self, state: OriginState, entry: MemoryEntry) -> bool:
        """Whether a lookup must not serve ``entry`` yet: a stamp moved and is not yet resolved."""
        if not self.invalidates:
            return False
        return any(
            dep.table in state.known and state.known[dep.table] != dep.version
            for dep in entry.dependencies
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}()  # {self.name} ({self.arm})"


class NoMemory(Strategy):
    """A0: keeps nothing, injects nothing; every episode re-derives every constraint."""

    name, arm = "none", "A0"
    stores = False
    invalidates = False


class NaiveMemory(Strategy):
    """A1: stores what it learns and injects it; no contract signal ever evicts an entry.

    It keeps learning: a newer fix for the same key replaces the one it has (paper §3.5, "stores
    what it learns"), so after a drift it injects the stale fix until a failure teaches it the new
    one — including the fix it injected into the request that drew the lesson, when the server
    teaches another value for a field that fix set (the entry is superseded, judged on the draft
    before injection). What it lacks is an invalidation channel: stamps and diffs are ignored.
    """

    name, arm = "naive", "A1"
    invalidates = False
