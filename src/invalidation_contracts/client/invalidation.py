"""Learning what the contract says and acting on it: stamps, feeds, rules, resync, the trust bound.

``Invalidation`` folds each contract signal into the origin's state (``ContractFold``) and hands
what moved to the strategy, holding back (for revalidation through the changes feed) the moves
that would pass the trust policy's eviction-rate bound. It also says what the memory needs
fetched, and which entries wait on it. Pure logic over a ``Ledger``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..protocol.models import ChangesFeed, ContractFields, RulesListing, Suggestion
from .entries import EvictionReason, MemoryEntry, later
from .events import Evicted, FetchChanges, FetchRules, Ignored, Need, NotStored
from .fold import ContractFold, Move
from .shared.ledger import Ledger
from .strategies import Strategy, evict_changed_rows, resolve_held, restamp_unchanged
from .trust import TrustPolicy


class Invalidation:
    """One strategy and one trust policy, applied to an origin's contract signals."""

    def __init__(self, strategy: Strategy, trust: TrustPolicy) -> None:
        self.strategy = strategy
        self.trust = trust

    # ------------------------------------------------------------------ signals

    def read_stamps(self, tx: Ledger, contract: ContractFields, delta_since: int | None) -> None:
        """A response's stamps: resync on a new epoch, hand moves to the strategy, advance."""
        fold = ContractFold(tx.state)
        old_epoch = fold.epoch_moved(contract.contract_epoch)
        if old_epoch is not None:
            self.resync(tx, f"contract_epoch moved from {old_epoch} to {contract.contract_epoch}")
        elif fold.behind(contract, delta_since):
            self.resync(
                tx,
                f"the server's head {contract.contract_seq} is behind the position "
                f"{delta_since} it was sent, in the same epoch (a restored history)",
            )
        reading = fold.read(contract, delta_since)
        if reading is None:
            return  # an older response than the memory's position: nothing new in it
        tx.confirmed = True
        moves = {
            table: (old, new)
            for table, (old, new) in reading.moves.items()
            if table not in reading.first_seen
            or any(_version(e, table) != new for e in tx.index.on_table(table))
        }
        for table, (old, new) in moves.items():
            if old:
                tx.version_moved(table, old, new)
        if moves:
            self.on_moves(tx, moves)
        if contract.rules_version is not None:
            self.rules_stamp(tx, contract.rules_version)
        st = tx.state
        fold.advance(reading, settled=not (st.pending or st.graph_pending or st.revalidating))

    def apply_feed(self, tx: Ledger, feed: ChangesFeed) -> None:
        """A changes feed: merge its transitions, judge rows, release what was held for it."""
        st = tx.state
        tx.confirmed = True
        if st.epoch is not None and feed.contract_epoch != st.epoch:
            self.resync(tx, f"changes feed is of epoch {feed.contract_epoch}, memory of {st.epoch}")
            st.epoch = feed.contract_epoch
            return
        st.epoch = feed.contract_epoch
        merged = ContractFold(st).merge_feed(feed)
        for table, old, new in merged.moves:
            tx.version_moved(table, old, new)
        if st.revalidating:
            held = set(st.revalidating)
            self.strategy.on_changes(tx, _feed_of(feed, held, keep=False))
            revalidated = _feed_of(feed, held, keep=True)
            evict_changed_rows(tx, revalidated)
            restamp_unchanged(tx, revalidated)
            resolve_held(tx, st.revalidating, feed.last_seq)
        else:
            self.strategy.on_changes(tx, feed)
        if merged.rules_version is not None:
            self.rules_stamp(tx, merged.rules_version)
        st.synced_seq = later(st.synced_seq, feed.last_seq)

    def apply_rules(self, tx: Ledger, listing: RulesListing) -> None:
        """A rule listing: restamp or evict rule-dependent entries against the rules in force."""
        old = tx.state.rules_version
        tx.state.rules_version = listing.rules_version
        if self.strategy.reads_rules:
            if old is not None and old != listing.rules_version:
                tx.rules_alert(old, listing.rules_version)
            self.strategy.on_rules_listing(tx, listing)

    def feed_unavailable(self, tx: Ledger) -> None:
        """No changes feed: entries on moved tables are evicted at table granularity."""
        self.strategy.on_changes_unavailable(tx)
        st = tx.state
        for table in sorted(st.revalidating):
            current = st.known.get(table)
            for entry in tx.index.on_table(table):
                if _version(entry, table) != current:
                    detail = f"{table} moved to {current} and no changes feed is available"
                    tx.evict(entry.id, EvictionReason.TABLE_CHANGED, detail)
        st.revalidating.clear()

    def resync(self, tx: Ledger, detail: str) -> None:
        """Lost history: every entry of the origin is unverified, and the position starts over."""
        for entry in list(tx.index):
            tx.evict(entry.id, EvictionReason.RESYNC, detail)
        tx.state.reset_contract()
        tx.confirmed = True

    def rules_stamp(self, tx: Ledger, new: str) -> None:
        old = ContractFold(tx.state).rules(new)
        if old is not None and self.strategy.reads_rules:
            tx.rules_alert(old, new)
            self.strategy.on_rules_moved(tx, old, new)

    def on_failure(self, tx: Ledger, suggestions: Sequence[Suggestion]) -> None:
        self.strategy.on_failure(tx, suggestions)

    def on_moves(self, tx: Ledger, moves: Mapping[str, Move]) -> None:
        """Hand version moves to the strategy, holding for revalidation those past the bound."""
        if self.trust.max_evictions_per_table is None:
            self.strategy.on_table_moves(tx, moves)
            return
        st = tx.state
        held = {
            table
            for table, (_, new) in moves.items()
            if new is not None
            and self.trust.bound_reached(st.stamp_evictions.get(table, ()), tx.now)
        }
        free = {table: move for table, move in moves.items() if table not in held}
        if free:
            before = len(tx.events)
            self.strategy.on_table_moves(tx, free)
            for event in tx.events[before:]:
                if isinstance(event, Evicted) and event.reason is EvictionReason.TABLE_CHANGED:
                    for table in set(tx.removed[event.entry_id].entry.tables) & set(free):
                        st.stamp_evictions.setdefault(table, []).append(tx.now)
            for table in free:
                if table in st.stamp_evictions:
                    st.stamp_evictions[table] = self.trust.recent(st.stamp_evictions[table], tx.now)
        for table in sorted(held):
            st.revalidating[table] = later(st.revalidating.get(table), tx.seq)
            old, new = moves[table]
            tx.emit(
                Ignored(
                    origin=tx.origin,
                    episode=tx.episode,
                    detail=(
                        f"{table} {old} -> {new}: {self.trust.max_evictions_per_table} stamp-driven"
                        f" evictions within window_s={self.trust.window_s:g}; revalidating through"
                        " /contract/changes instead of evicting"
                    ),
                )
            )

    def distrust(self, tx: Ledger, doubt: str, suggestions: Sequence[Suggestion] = ()) -> None:
        """A contract the trust policy rejects: report it, act on none of it."""
        detail = f"unverified contract: {doubt}"
        tx.emit(Ignored(origin=tx.origin, episode=tx.episode, detail=detail))
        for suggestion in suggestions:
            tx.emit(
                NotStored(
                    origin=tx.origin,
                    episode=tx.episode,
                    suggestion_type=suggestion.type,
                    reason=detail,
                )
            )

    # ------------------------------------------------------------------ what is outstanding

    def needs(self, tx: Ledger) -> list[Need]:
        needs: list[Need] = []
        if self.strategy.wants_changes(tx) or tx.state.revalidating:
            needs.append(FetchChanges(tx.origin, tx.state.synced_seq or 0, tx.state.epoch))
        if self.strategy.wants_rules(tx):
            needs.append(FetchRules(tx.origin))
        return needs

    def withheld(self, tx: Ledger, need: Need) -> tuple[str, ...]:
        """The entries a lookup keeps out of service until ``need`` is fulfilled."""
        st = tx.state
        if isinstance(need, FetchChanges):
            tables = {*st.pending, *st.revalidating}
            if st.graph_pending:
                tables |= set(st.known)
            candidates = [e for table in sorted(tables) for e in tx.index.on_table(table)]
        else:
            candidates = tx.index.rule_dependent()
        ids = {e.id: e.serial for e in candidates if self.strategy.withholds(st, e)}
        return tuple(sorted(ids, key=ids.__getitem__))


def _version(entry: MemoryEntry, table: str) -> str | None:
    dep = entry.dependency(table)
    return dep.version if dep is not None else None


def _feed_of(feed: ChangesFeed, tables: set[str], *, keep: bool) -> ChangesFeed:
    """The part of a feed about ``tables`` (``keep``) or about every other table."""
    return feed.model_copy(
        update={
            "rows": [r for r in feed.rows if (r.table in tables) == keep],
            "tables": [t for t in feed.tables if (t.table in tables) == keep],
            "rules": [] if keep else feed.rules,
        }
    )
