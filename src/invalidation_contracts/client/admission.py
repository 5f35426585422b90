"""Admission: which fixes a failure teaches, the entries they become, and which injected fixes it
contradicted.

A suggestion becomes an entry only if it is cacheable and passes every client-side check: its
values within ``Limits``, a scope the request that drew it satisfies (an empty scope only when
the server marks the fix ``origin_wide``), a patch that only adds, replaces, removes or tests what
its parameters show, the trust policy's parameter guard, and room in the origin. Pure logic over a
``Ledger``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..protocol.canonical import canonical_json
from ..protocol.models import CacheHint, Suggestion, field_pointer
from .budget import budgeted
from .entries import (
    Dependency,
    EvictionReason,
    MemoryEntry,
    MemoryKey,
    Provenance,
    dependencies_of,
    rule_vector,
    scope_matches,
    serial_of,
)
from .events import NotStored
from .invalidation import Invalidation
from .lesson import Lesson
from .limits import Limits
from .patching import ALLOWED_OPS
from .policies import Policies
from .shared.ledger import Ledger
from .trust import TrustPolicy
from .wire import json_size, refuse


class Admission:
    """Turns lessons into entries under one strategy, trust policy and set of limits."""

    def __init__(
        self,
        invalidation: Invalidation,
        trust: TrustPolicy,
        limits: Limits,
        policies: Policies | None = None,
    ) -> None:
        self.invalidation = invalidation
        self.strategy = invalidation.strategy
        self.policies = policies if policies is not None else Policies(self.strategy)
        self.trust = trust
        self.limits = limits

    def learn(self, tx: Ledger, lesson: Lesson) -> None:
        """Retire the injected fixes the failure contradicted (if live), then store its fixes.

        An invalidating strategy evicts them as contradicted; one that reads no contract (naive
        memory) still replaces what it learned with what it is taught now: superseded.
        """
        for entry_id in lesson.contradicted:
            refuted = tx.index.get(entry_id)
            if refuted is not None:
                self.policies.of(tx).on_refuted(tx, refuted)
            if self.strategy.invalidates:
                tx.evict(
                    entry_id,
                    EvictionReason.CONTRADICTED,
                    "the server rejected a request carrying it",
                )
            else:
                tx.evict(
                    entry_id,
                    EvictionReason.SUPERSEDED,
                    "the server taught another value for a field it set, on a request carrying it",
                )
        for suggestion in lesson.suggestions:
            self.store(tx, suggestion, lesson)

    def store(self, tx: Ledger, suggestion: Suggestion, lesson: Lesson) -> None:
        """Store one suggestion as an entry if it passes every check; report it otherwise."""
        if not self._admissible(tx, suggestion, lesson.request):
            return
        st = tx.state
        contract = lesson.contract
        stamped = (contract.table_versions if contract else None) or {}
        deps = dependencies_of(
            suggestion, lambda table: stamped.get(table) or st.known.get(table, "")
        )
        suggestion, deps = budgeted(tx, suggestion, deps, self.limits)
        key = MemoryKey.of(tx.origin, suggestion.type, suggestion.scope, lesson.operation)
        old = tx.index.by_key(key)
        if old is not None and not self.strategy.replaces:
            self._not_stored(
                tx, suggestion, f"{self.strategy.name} memory keeps its entry {old.id} for this key"
            )
            return
        if old is None and len(tx.index) >= self.limits.max_entries_per_origin:
            refuse(
                tx,
                "max_entries_per_origin",
                f"the origin holds {len(tx.index)} entries",
                suggestion_type=suggestion.type,
                cap=self.limits.max_entries_per_origin,
                actual=len(tx.index),
            )
            return
        seq = (
            contract.contract_seq
            if contract and contract.contract_seq is not None
            else st.known_seq
        )
        rules_version = (contract.rules_version if contract else None) or st.rules_version
        if old is not None and _same_fix(old, suggestion, deps, lesson.derived_from):
            # Taught again what it holds: a restamp, not a replacement and a tombstone (bounded
            # history: 10,000 identical 422s leave one entry and no tombstone).
            versions = {dep.table: dep.version for dep in deps if dep.version}
            tx.restamp(old.id, versions=versions, rules_version=rules_version, validated_seq=seq)
            self.policies.of(tx).on_confirmed(tx, old)
            return
        serial = st.next_serial
        st.next_serial += 1
        entry_id = f"e{serial}"
        if old is not None:
            self.policies.of(tx).on_refuted(tx, old)
            tx.evict(old.id, EvictionReason.SUPERSEDED, f"replaced by {entry_id}")
        entry = MemoryEntry(
            id=entry_id,
            serial=serial,
            key=key,
            suggestion=suggestion,
            dependencies=deps,
            rules=rule_vector(suggestion.rules),
            rules_version=rules_version,
            contract_seq=seq,
            contract_epoch=(contract.contract_epoch if contract else None) or st.epoch,
            validated_seq=seq,
            validated_at=tx.now,
            provenance=Provenance(tx.episode, lesson.response_id, tx.now),
            derived_from=lesson.derived_from,
        )
        tx.add(entry, replaced=old.id if old is not None else None)
        self.policies.of(tx).on_stored(tx, entry)
        if not self.strategy.invalidates:
            return
        mismatched: dict[str, tuple[str, str | None]] = {}
        for dep in deps:
            known = st.known.get(dep.table)
            if known is None:
                if dep.version:
                    st.known[dep.table] = dep.version
            elif known != dep.version:
                mismatched[dep.table] = (dep.version, known)
        if mismatched:
            self.invalidation.on_moves(tx, mismatched)

    def contradicted(
        self,
        tx: Ledger,
        suggestions: Sequence[Suggestion],
        injected: Sequence[str],
        request: Mapping[str, Any] | None,
    ) -> tuple[str, ...]:
        """Injected entries whose fix sets a field that a suggestion of this failure sets otherwise.

        This is the failure-gated channel every invalidating strategy has: the server just said
        the value the cached fix supplied is wrong for this request (naive memory, which keeps
        learning, replaces the entry with the new lesson). An entry of another operation, or whose
        scope the *draft* did not satisfy, did not apply to the request, so the failure says
        nothing about it (a mis-scoped patch is never a contradiction). The draft is judged before
        injection: a fix keyed on the very field it rewrites (``token: debit → credit``) left the
        request carrying its own value, not its scope's (``draft_before``).
        """
        if not (suggestions and self.strategy.stores and self.strategy.replaces):
            return ()
        out = []
        for entry_id in injected:
            entry = tx.index.get(entry_id)
            if entry is None or entry.operation != tx.operation:
                continue
            if request is not None and not entry.matches(draft_before(request, entry)):
                continue
            mine = entry.suggestion.parameters
            if any(
                name in mine and canonical_json(mine[name]) != canonical_json(value)
                for s in suggestions
                for name, value in s.parameters.items()
            ):
                out.append(entry_id)
        return tuple(out)

    def injected(self, tx: Ledger, injected: Iterable[str]) -> tuple[str, ...]:
        """The injected ids that are entries of this origin (live, or evicted and on record).

        Ids are ``e<serial>`` and serials are issued in order, so an id below the next serial is
        an entry of this origin whether or not it is still live; no tombstone read is needed.
        """
        out = []
        for entry_id in dict.fromkeys(injected):
            serial = serial_of(entry_id)
            if entry_id in tx.index or (serial is not None and serial < tx.state.next_serial):
                out.append(entry_id)
        return tuple(out)

    # ------------------------------------------------------------------ checks

    def _admissible(
        self, tx: Ledger, suggestion: Suggestion, request: Mapping[str, Any] | None
    ) -> bool:
        unhinted = suggestion.cache_hint is None and self.policies.of(tx).reads_unhinted
        if suggestion.cache_hint is not CacheHint.CACHEABLE and not unhinted:
            hint = suggestion.cache_hint.value if suggestion.cache_hint else "absent"
            self._not_stored(tx, suggestion, f"cache_hint is {hint}")
            return False
        refusal = self._refusal(suggestion, request)
        if refusal is not None:
            bound, detail, cap, actual = refusal
            refuse(tx, bound, detail, suggestion_type=suggestion.type, cap=cap, actual=actual)
            return False
        if suggestion.origin_wide and not suggestion.scope and not self.trust.allow_origin_wide:
            self._not_stored(
                tx, suggestion, "refused: the trust policy does not keep origin-wide fixes"
            )
            return False
        if self.trust.guard_parameters:
            refused = self.trust.injection(suggestion, tx.state.patchable)
            if refused is not None:
                self._not_stored(tx, suggestion, f"refused: {refused}")
                return False
        return True

    def _refusal(
        self, suggestion: Suggestion, request: Mapping[str, Any] | None
    ) -> tuple[str, str, int | None, int | None] | None:
        """``(bound, detail, cap, actual)`` of the first client-side bound the fix breaks."""
        cap = self.limits.max_parameter_bytes
        values = [(f"parameter {name}", v) for name, v in suggestion.parameters.items()]
        values += [(f"patch value at {op.path}", op.value) for op in suggestion.patch or ()]
        for what, value in values:
            size = json_size(value, cap)
            if size > cap:
                return "max_parameter_bytes", f"{what} is {size} JSON bytes", cap, size
        scope = suggestion.scope or {}
        if not scope and not suggestion.origin_wide:
            return (
                "unscoped",
                "an empty scope, and the server did not mark the fix origin_wide",
                None,
                None,
            )
        if request is not None and not scope_matches(scope.items(), request):
            return (
                "scope",
                "its scope names values the request that drew it did not have",
                None,
                None,
            )
        problem = patch_problem(suggestion)
        if problem is not None:
            return "patch", problem, None, None
        return None

    def _not_stored(self, tx: Ledger, suggestion: Suggestion, reason: str) -> None:
        tx.emit(
            NotStored(
                origin=tx.origin, episode=tx.episode, suggestion_type=suggestion.type, reason=reason
            )
        )


def draft_before(request: Mapping[str, Any], entry: MemoryEntry) -> Mapping[str, Any]:
    """``request`` as its draft was before ``entry`` was injected into it.

    A scope field the entry's fix writes, carrying the value the fix wrote, held the scope's
    value in the draft (the entry was served only to a draft matching its scope). Every other
    field is as sent.
    """
    written = entry.suggestion.parameters
    restored: dict[str, Any] | None = None
    for name, value in entry.key.scope_items:
        if name in written and name in request and _same(request[name], written[name]):
            restored = restored if restored is not None else dict(request)
            restored[name] = value
    return restored if restored is not None else request


def _same(a: object, b: object) -> bool:
    """JSON equality (``1`` and ``true`` differ); ``==`` for what is not JSON."""
    try:
        return canonical_json(a) == canonical_json(b)
    except (TypeError, ValueError):
        return bool(a == b)


def patch_problem(suggestion: Suggestion) -> str | None:
    """Why a suggestion's patch may not be kept: an operation other than add, replace, remove or
    test, or a write that is not what its parameters show. None when it is fine (or absent)."""
    fields = {field_pointer(name): value for name, value in suggestion.parameters.items()}
    for op in suggestion.patch or ():
        if op.op not in ALLOWED_OPS:
            return (
                f"a {op.op!r} operation ({op.path}); patches may only add, replace, remove or test"
            )
        if op.op == "test":
            continue
        owner = next((p for p in fields if op.path == p or op.path.startswith(p + "/")), None)
        if owner is None:
            return f"it writes {op.path}, which its parameters do not show"
        if op.path != owner:
            continue
        shown = fields[owner]
        written = None if op.op == "remove" else op.value
        if canonical_json(written) != canonical_json(shown):
            return f"it writes {op.path} with another value than its parameters show"
    return None


def _same_fix(
    old: MemoryEntry,
    suggestion: Suggestion,
    deps: tuple[Dependency, ...],
    derived_from: tuple[str, ...],
) -> bool:
    """Whether a fix taught again is the one held: the same suggestion, read from the same rows
    (versions aside), derived from the same entries."""
    return (
        old.suggestion == suggestion
        and old.derived_from == derived_from
        and tuple((d.table, d.keys, d.membership) for d in old.dependencies)
        == tuple((d.table, d.keys, d.membership) for d in deps)
    )
