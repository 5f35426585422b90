"""Drift labels checked against the oracle before a run (issue 23, item 5).

A drift event is labelled ``breaking`` (a cacheable fix some scheduled task draws before it is no
longer what the server suggests: a cached copy goes stale), ``benign`` (it changes rows or rules,
and no such fix) or ``touch`` (no row changes, the version moves). A
report's figures are read per label, so a wrong label silently moves them; ``check_labels``
replays the drift on a fresh registry and recomputes each event's label by brute force: every
scheduled family's draft is sent, its fixes applied in turn (as a compliant planner would), and
the chain of fixes is compared before and after the event.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..protocol.canonical import canonical_json
from ..server import Provider, Registry, RegistryState, TableChange

if TYPE_CHECKING:
    from ..domains.catalog import DomainCatalog
    from .scenario import DriftEvent, Scenario

MAX_CHAIN = 5
"""Fixes applied in turn per draft before the chain is cut (a draft that never passes)."""

Chain = tuple[tuple[str, bytes], ...]


def fix_chain(
    provider: Provider,
    catalog: DomainCatalog,
    draft: Mapping[str, Any],
    state: RegistryState,
    family: str | None = None,
) -> Chain:
    """The cacheable fixes ``draft`` draws at ``state`` on the route of ``family`` (the default
    route when None), each applied in turn: ``(type, params)``.

    A fix that appears where none was, or replaces one the client could not cache, makes nothing
    stale; only a cacheable fix that changes or goes does.
    """
    chain: list[tuple[str, bytes]] = []
    route = catalog.route if family is None else catalog.route_of(family)
    request = dict(draft)
    for _ in range(MAX_CHAIN):
        try:
            findings = provider.findings(route, request, state)
        except ValidationError:
            break
        if not findings:
            break
        chain.extend(
            sorted(
                (f.violation.type, canonical_json(dict(f.violation.parameters)))
                for f in findings
                if f.cacheable
            )
        )
        for finding in findings:
            request.update(finding.violation.parameters)
    return tuple(chain)


def observed_label(
    scenario: Scenario, catalog: DomainCatalog, registry: Registry, event: DriftEvent
) -> tuple[str, str]:
    """Apply ``event`` to ``registry``; its label by brute force, and why."""
    provider = Provider(catalog.domain, registry)
    drafts = {f: catalog.family(f).draft() for f in dict.fromkeys(scenario.schedule)}
    before_state = registry.state
    before = {f: fix_chain(provider, catalog, d, before_state, f) for f, d in drafts.items()}
    moved = apply_event(catalog, registry, event)
    after_state = registry.state
    for family, draft in drafts.items():
        after = set(fix_chain(provider, catalog, draft, after_state, family))
        gone = [fix for fix in before[family] if fix not in after]
        if gone:
            kind, params = gone[0]
            return "breaking", (
                f"the cacheable fix {kind} {params.decode()} that task family {family!r} draws "
                "before it is no longer what the server suggests"
            )
    if moved:
        return "benign", "it changes rows, and no scheduled task family's fixes"
    return "touch", "it changes no row"


def apply_event(catalog: DomainCatalog, registry: Registry, event: DriftEvent) -> bool:
    """Apply one drift event as the harness does; whether any row or rule changed."""
    parts = event.table_drifts()
    if parts:
        changes = {}
        for part in parts:
            snap = catalog.read_snapshot(part.snapshot)
            changes[snap.table] = TableChange.reload(snap.rows, part.version or snap.version)
        return any(bool(r.diff) for r in registry.apply(changes).values())
    assert event.rules is not None
    ruled = registry.set_rules(catalog.read_rule_set(event.rules))
    return bool(ruled.added or ruled.removed)


def check_labels(scenario: Scenario, catalog: DomainCatalog) -> list[str]:
    """One message per drift event whose label the oracle contradicts (empty: all correct)."""
    registry = catalog.domain.registry()
    wrong = []
    for event in scenario.drift:
        label, why = observed_label(scenario, catalog, registry, event)
        if label != event.kind:
            wrong.append(
                f"the drift after episode {event.after_episode} ({event.target}) is labelled "
                f"{event.kind!r}, but the oracle finds it {label!r}: {why}"
            )
    return wrong
