"""Invalidation strategies: the paper's client arms (§3.5 Table 2, §6.3 Table 5), one class each.

A strategy decides what a contract signal does to the entries; it never performs I/O. When it needs
the row diff or the rule declarations it marks the origin's state pending, and the memory turns that
into a need (``FetchChanges``/``FetchRules``) for the adapter to fulfil. Entries whose stamps no
longer match the origin's known versions are *withheld* (not served) until that need is answered.

Every row-level and rules strategy extends ``RowInvalidation`` (A2D): it also invalidates tables at
row granularity. An entry that read a table's key set (``membership``) goes when a key is added or
removed, not when only a row's contents change. An L1 entry (a ``table`` and no dependency
vector) names its row through its scope:
the diff's changed keys are matched to the scope values it was stored under, as the paper's A2D
does with L1 stamps and the reload diff. Any other dependency without keys (an L4 policy that
scanned the table) is handled at table granularity: any row change in its table evicts it, a touch
restamps it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from ..protocol.models import ChangesFeed, RulePattern, RulesListing, RuleTriple, Suggestion
from .contractless import CONTRACTLESS_CLASSES
from .entries import EvictionReason, MemoryEntry, later, rule_vector
from .shared.ledger import Ledger
from .state import OriginState

# The interface and the baselines live apart so the contract-less policies extend them without
# importing this catalogue; every arm is importable from here.
from .strategy_base import Move
from .strategy_base import NaiveMemory as NaiveMemory
from .strategy_base import NoMemory as NoMemory
from .strategy_base import Strategy as Strategy

#: The strategies by name and by arm code (``strategy_for`` takes either, in any case).
StrategyName = Literal[
    "none",
    "naive",
    "table",
    "row",
    "row+consumers",
    "row+graph",
    "rules-oracle",
    "rules-stamp",
    "rules-stamp+vectors",
    "ttl",
    "verify",
    "learned",
    "A0",
    "A1",
    "A1T",
    "A1V",
    "A1L",
    "A2",
    "A2D",
    "A2DC",
    "A2DG",
    "A2DO",
    "A2DR",
    "A2DRC",
]


class TableInvalidation(Strategy):
    """A2: a table's version moved, so every entry depending on that table goes (touch included)."""

    name, arm = "table", "A2"

    def on_table_moves(self, tx: Ledger, moves: Mapping[str, Move]) -> None:
        for table, (old, new) in moves.items():
            for entry in tx.index.on_table(table):
                dep = entry.dependency(table)
                if new is None or (dep is not None and dep.version != new):
                    tx.evict(entry.id, EvictionReason.TABLE_CHANGED, _moved(table, old, new))

    def on_changes(self, tx: Ledger, feed: ChangesFeed) -> None:
        for tr in sorted(feed.tables, key=lambda t: t.seq):
            for entry in tx.index.on_table(tr.table):
                if _after(tr.seq, entry):
                    tx.evict(
                        entry.id,
                        EvictionReason.TABLE_CHANGED,
                        _moved(tr.table, tr.old_version, tr.new_version, tr.seq),
                    )


class RowInvalidation(Strategy):
    """A2D: on a version move read the row diff; evict entries on changed rows, restamp the rest."""

    name, arm = "row", "A2D"

    def on_table_moves(self, tx: Ledger, moves: Mapping[str, Move]) -> None:
        for table, (old, new) in moves.items():
            entries = tx.index.on_table(table)
            if new is None:
                for entry in entries:
                    tx.evict(entry.id, EvictionReason.TABLE_CHANGED, _moved(table, old, None))
                continue
            if any(_version(entry, table) != new for entry in entries):
                seen = tx.state.pending.get(table, tx.seq)
                tx.state.pending[table] = later(seen, tx.seq)

    def on_changes(self, tx: Ledger, feed: ChangesFeed) -> None:
        evict_changed_rows(tx, feed)
        self.on_transitions(tx, feed)
        restamp_unchanged(tx, feed)
        self._resolve_pending(tx, feed.last_seq)

    def on_transitions(self, tx: Ledger, feed: ChangesFeed) -> None:
        """Hook between row eviction and restamping, for strategies that read more of the feed."""

    def on_changes_unavailable(self, tx: Ledger) -> None:
        for table in sorted(tx.state.pending):
            current = tx.state.known.get(table)
            for entry in tx.index.on_table(table):
                if _version(entry, table) != current:
                    detail = f"{table} moved to {current} and no changes feed is available"
                    tx.evict(entry.id, EvictionReason.TABLE_CHANGED, detail)
        tx.state.pending.clear()

    def wants_changes(self, tx: Ledger) -> bool:
        return bool(tx.state.pending)

    def _resolve_pending(self, tx: Ledger, last_seq: int) -> None:
        resolve_held(tx, tx.state.pending, last_seq)


class RowWithConsumers(RowInvalidation):
    """A2DC: A2D; evicting a stale entry also evicts the entries learned while it was injected."""

    name, arm = "row+consumers", "A2DC"
    cascades = True


class RowWithGraph(RowInvalidation):
    """A2DG: A2D, and entries reading a node in a transition's ``affected_downstream`` go too."""

    name, arm = "row+graph", "A2DG"

    def on_table_moves(self, tx: Ledger, moves: Mapping[str, Move]) -> None:
        super().on_table_moves(tx, moves)
        if len(tx.index):
            tx.state.graph_pending = True

    def on_transitions(self, tx: Ledger, feed: ChangesFeed) -> None:
        for tr in sorted(feed.tables, key=lambda t: t.seq):
            for node in tr.affected_downstream:
                table, sep, key = node.partition(":")
                if not sep:
                    continue
                for entry in tx.index.on_row(table, key) + tx.index.whole_table(table):
                    if _after(tr.seq, entry):
                        detail = f"{node} is downstream of {tr.table} (seq {tr.seq})"
                        tx.evict(entry.id, EvictionReason.DOWNSTREAM, detail)
        tx.state.graph_pending = False

    def on_changes_unavailable(self, tx: Ledger) -> None:
        super().on_changes_unavailable(tx)
        tx.state.graph_pending = False

    def wants_changes(self, tx: Ledger) -> bool:
        return bool(tx.state.pending) or tx.state.graph_pending


class _RulesAware(RowInvalidation):
    """A2D, plus a reading of the ``rules_version`` stamp (the L6 channel).

    An entry relies on the rules it found (``rules``) and on the rules it found absent
    (``absent_rules``): a found rule removed, or a rule matching an absent lookup declared,
    makes it stale.
    """

    reads_rules = True

    def _dispose_against(self, tx: Ledger, listing: RulesListing) -> None:
        declared = {rule.triple for rule in listing.rules}
        vias = {rule.triple: rule.via for rule in listing.rules}
        for entry in rule_readers(tx):
            missing = [rule for rule in entry.rules if rule not in declared]
            rerouted = _rerouted(tx.state, entry, vias, listing.rules_version)
            appeared = sorted(
                triple
                for triple in declared - set(entry.rules)
                if any(_matches(triple, pattern) for pattern in absent_rules(entry))
            )
            if missing:
                detail = f"relies on rule {list(missing[0])}, no longer declared"
                tx.evict(entry.id, EvictionReason.RULES, detail)
            elif appeared:
                detail = f"relies on rule {list(appeared[0])} being absent, now declared"
                tx.evict(entry.id, EvictionReason.RULES, detail)
            elif rerouted:
                tx.evict(entry.id, EvictionReason.RULES, rerouted)
            else:
                tx.restamp(entry.id, rules_version=listing.rules_version)
        tx.state.declared = [[*rule.triple, rule.via] for rule in listing.rules]
        tx.state.declared_version = listing.rules_version


class RulesOracle(_RulesAware):
    """A2DO: on a rules stamp move, read ``/contract/rules``; evict entries whose rules are gone."""

    name, arm = "rules-oracle", "A2DO"

    def on_rules_moved(self, tx: Ledger, old: str, new: str) -> None:
        if rule_readers(tx):
            tx.state.rules_pending = True

    def on_rules_listing(self, tx: Ledger, listing: RulesListing) -> None:
        self._dispose_against(tx, listing)
        tx.state.rules_pending = False

    def on_rules_unavailable(self, tx: Ledger) -> None:
        for entry in rule_readers(tx):
            if entry.rules_version != tx.state.rules_version:
                tx.evict(
                    entry.id, EvictionReason.RULES, "rules moved and no rule listing is available"
                )
        tx.state.rules_pending = False

    def wants_rules(self, tx: Ledger) -> bool:
        return tx.state.rules_pending

    def withholds(self, state: OriginState, entry: MemoryEntry) -> bool:
        if super().withholds(state, entry):
            return True
        return (
            state.rules_pending
            and reads_rules(entry)
            and entry.rules_version != state.rules_version
        )


class RulesStamp(_RulesAware):
    """A2DR: on a rules stamp move, clear every entry that relied on any rule."""

    name, arm = "rules-stamp", "A2DR"

    def on_rules_moved(self, tx: Ledger, old: str, new: str) -> None:
        self._clear(tx, new, f"rules_version {old} -> {new}")

    def on_rules_listing(self, tx: Ledger, listing: RulesListing) -> None:
        self._clear(tx, listing.rules_version, f"rules_version is now {listing.rules_version}")

    def _clear(self, tx: Ledger, version: str, detail: str) -> None:
        for entry in rule_readers(tx):
            if entry.rules_version != version:
                tx.evict(entry.id, EvictionReason.RULES, detail)


class RulesStampWithVectors(_RulesAware):
    """A2DRC: a rules stamp move only raises the alert; the next failure disposes surgically.

    On a failure, each suggestion carrying ``rules`` is the rule vector its type relies on now. An
    entry of that type stamped under an older ``rules_version`` is evicted if its vector differs
    and restamped if it matches; entries of types no failure has covered yet stay in service
    under the alert. A rule listing, when one is fed, disposes of all of them against the rules in
    force, as the oracle does.
    """

    name, arm = "rules-stamp+vectors", "A2DRC"

    def on_failure(self, tx: Ledger, suggestions: Sequence[Suggestion]) -> None:
        current = tx.state.rules_version
        for suggestion in suggestions:
            if suggestion.rules is None and suggestion.absent_rules is None:
                continue
            vector = rule_vector(suggestion.rules)
            absent = pattern_vector(suggestion.absent_rules)
            for entry in tx.index.of_type(suggestion.type):
                if entry.rules_version == current:
                    continue
                if (
                    entry.rules != vector
                    or absent_rules(entry) != absent
                    or _routed(entry.suggestion) != _routed(suggestion)
                ):
                    detail = (
                        f"rule vector of {suggestion.type} changed under rules_version {current}"
                    )
                    tx.evict(entry.id, EvictionReason.RULES, detail)
                else:
                    tx.restamp(entry.id, rules_version=current)

    def on_rules_listing(self, tx: Ledger, listing: RulesListing) -> None:
        self._dispose_against(tx, listing)


#: Every strategy class, in ladder order (the contract-less policies after naive memory).
STRATEGY_CLASSES: tuple[type[Strategy], ...] = (
    NoMemory,
    NaiveMemory,
    *CONTRACTLESS_CLASSES,
    TableInvalidation,
    RowInvalidation,
    RowWithConsumers,
    RowWithGraph,
    RulesOracle,
    RulesStamp,
    RulesStampWithVectors,
)

_BY_NAME: dict[str, type[Strategy]] = {
    spelling.lower(): cls for cls in STRATEGY_CLASSES for spelling in (cls.name, cls.arm)
}


def strategy_for(spec: str | Strategy | type[Strategy]) -> Strategy:
    """A strategy from its name (``"row"``), its arm code (``"A2D"``), a class or an instance."""
    if isinstance(spec, Strategy):
        return spec
    if isinstance(spec, type) and issubclass(spec, Strategy):
        return spec()
    cls = _BY_NAME.get(str(spec).strip().lower())
    if cls is None:
        known = ", ".join(f"{c.name} ({c.arm})" for c in STRATEGY_CLASSES)
        raise ValueError(f"unknown strategy {spec!r}; expected one of {known}")
    return cls()


def reads_rules(entry: MemoryEntry) -> bool:
    """Whether the entry relied on a rule being declared, or on one being absent."""
    return bool(entry.rules or entry.suggestion.absent_rules)


def rule_readers(tx: Ledger) -> list[MemoryEntry]:
    """The origin's entries that relied on a rule, declared or absent, in store order."""
    return [entry for entry in tx.index if reads_rules(entry)]


def absent_rules(entry: MemoryEntry) -> tuple[RulePattern, ...]:
    """The rule lookups the entry's fix relied on finding nothing new for (``absent_rules``)."""
    return pattern_vector(entry.suggestion.absent_rules)


def pattern_vector(patterns: Iterable[RulePattern] | None) -> tuple[RulePattern, ...]:
    """A sorted, duplicate-free tuple of rule lookups."""
    return tuple(sorted(set(patterns or ()), key=lambda p: tuple(part or "" for part in p)))


def _rerouted(
    state: OriginState, entry: MemoryEntry, vias: Mapping[RuleTriple, str | None], version: str
) -> str | None:
    """Why ``entry`` is stale because a rule it relies on may have changed its ``via`` (None: not).

    A fix carrying ``rule_vias`` says which ``via`` each rule had when it was made. Without it
    (a server predating the field, or one whose rules had no ``via``) the ``via`` in force at the
    entry's stamp comes from the declarations last read; under declarations never read, a rule
    that has a ``via`` now cannot be cleared, and one without is taken as unchanged."""
    if not entry.rules or entry.rules_version == version:
        return None
    learned = entry.suggestion.vias()
    if learned is not None:
        for rule in entry.rules:
            was = learned.get(rule)
            if rule in vias and was != vias[rule]:
                return f"rule {list(rule)} changed its via from {was!r} to {vias[rule]!r}"
        return None
    if state.declared is not None and entry.rules_version == state.declared_version:
        before = {(d[0], d[1], d[2]): d[3] for d in state.declared}
        for rule in entry.rules:
            if rule in before and rule in vias and before[rule] != vias[rule]:
                return f"rule {list(rule)} changed its via from {before[rule]!r} to {vias[rule]!r}"
        return None
    for rule in entry.rules:
        if vias.get(rule) is not None:
            return f"rule {list(rule)} has via {vias[rule]!r}, not known at {entry.rules_version}"
    return None


def _routed(suggestion: Suggestion) -> dict[RuleTriple, str]:
    """The rules a fix relied on that had a ``via``, with it (no ``rule_vias``: none had one)."""
    return {rule: via for rule, via in (suggestion.vias() or {}).items() if via is not None}


def _matches(triple: RuleTriple, pattern: RulePattern) -> bool:
    return all(want is None or want == got for want, got in zip(pattern, triple, strict=True))


def evict_changed_rows(tx: Ledger, feed: ChangesFeed) -> None:
    """Row-level judgement: evict entries on changed rows, entries that read a table's key set when
    a key is added or removed; an L1 entry when a changed key is one of its scope values; any other
    keyless entry on any content change of its table."""
    rows = sorted(feed.rows, key=lambda r: r.seq)
    for change in rows:
        for entry in tx.index.on_row(change.table, change.key):
            if _after(change.seq, entry):
                detail = f"{change.table}:{change.key} {change.op} at seq {change.seq}"
                tx.evict(entry.id, EvictionReason.ROW_CHANGED, detail)
        if change.op == "changed":
            continue
        for entry in tx.index.on_key_set(change.table):
            if _after(change.seq, entry):
                detail = (
                    f"{change.table}:{change.key} {change.op} at seq {change.seq} "
                    "(the fix read the table's key set)"
                )
                tx.evict(entry.id, EvictionReason.ROW_CHANGED, detail)
    for tr in sorted(feed.tables, key=lambda t: t.seq):
        if tr.touch:
            continue
        changed = [r for r in rows if r.table == tr.table]
        for entry in tx.index.whole_table(tr.table):
            if not _after(tr.seq, entry):
                continue
            named = scope_rows(entry)
            if named is not None and changed:
                hit = next((r for r in changed if r.key in named and _after(r.seq, entry)), None)
                if hit is not None:
                    detail = (
                        f"{hit.table}:{hit.key} {hit.op} at seq {hit.seq} "
                        "(a row its scope names; L1 entry)"
                    )
                    tx.evict(entry.id, EvictionReason.ROW_CHANGED, detail)
                continue
            detail = _moved(tr.table, tr.old_version, tr.new_version, tr.seq)
            tx.evict(entry.id, EvictionReason.TABLE_CHANGED, detail)


def scope_rows(entry: MemoryEntry) -> frozenset[str] | None:
    """The row keys an L1 entry names through its scope, or None when row identity is unknown.

    At L1 a suggestion carries only its ``table``; the row it came from is keyed by a request value
    (paper §3.7, "row identity by key": ``active_csm_codes`` rows are plans, and the fix is scoped
    by the plan). An entry with a dependency vector (L4) is judged by its vector's keys instead;
    one whose vector has no keys scanned the table and stays at table granularity.
    """
    if entry.suggestion.tables:
        return None
    values = frozenset(
        str(value)
        for value in entry.key.scope_fields.values()
        if isinstance(value, (str, int)) and not isinstance(value, bool)
    )
    return values or None


def restamp_unchanged(tx: Ledger, feed: ChangesFeed) -> None:
    """Stamp every surviving entry on a table the feed moved with that table's latest version."""
    latest = {tr.table: tr.new_version for tr in sorted(feed.tables, key=lambda t: t.seq)}
    stamps: dict[str, dict[str, str]] = {}
    for table, version in latest.items():
        for entry in tx.index.on_table(table):
            stamps.setdefault(entry.id, {})[table] = version
    for entry_id in sorted(stamps, key=lambda i: tx.index.entries[i].serial):
        tx.restamp(entry_id, versions=stamps[entry_id], validated_seq=feed.last_seq)


def resolve_held(tx: Ledger, held: dict[str, int | None], last_seq: int) -> None:
    """Release the tables in ``held`` the feed now covers; evict what it leaves unexplained."""
    for table, seen in sorted(held.items()):
        if seen is not None and seen > last_seq:
            continue
        del held[table]
        current = tx.state.known.get(table)
        for entry in tx.index.on_table(table):
            if _version(entry, table) != current:
                old = _version(entry, table)
                detail = f"no change in the feed explains {table} {old} -> {current}"
                tx.evict(entry.id, EvictionReason.TABLE_CHANGED, detail)


def _version(entry: MemoryEntry, table: str) -> str | None:
    dep = entry.dependency(table)
    return dep.version if dep is not None else None


def _after(seq: int, entry: MemoryEntry) -> bool:
    """Whether a change at ``seq`` happened after the entry was last validated."""
    return entry.validated_seq is None or seq > entry.validated_seq


def _moved(table: str, old: str, new: str | None, seq: int | None = None) -> str:
    text = f"{table} {old} -> {new}" if new is not None else f"{table} is no longer served"
    return f"{text} at seq {seq}" if seq is not None else text
