"""A scenario checked against the domain it names, before anything runs: its task families,
snapshots and rule sets exist, its drift labels are the oracle's (``labels.check_labels``), and
its stale slots are the paper's. ``resolve_scenario`` loads a manifest and checks it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .labels import check_labels
from .scenario import Scenario, ScenarioError, ScenarioMismatch, load_scenario

if TYPE_CHECKING:
    from ..domains.catalog import DomainCatalog

__all__ = ["check_scenario", "paper_stale_slots", "resolve_scenario", "verify_domain"]


def paper_stale_slots(scenario: Scenario, catalog: DomainCatalog) -> list[int]:
    """The paper's rule (§4.1): the first compliance-class episode after each breaking event.

    In that slot every memory arm still injects the pre-drift fix, because no arm can know the
    table moved until a response says so.
    """
    slots = []
    for event in scenario.drift:
        if event.kind != "breaking":
            continue
        for episode in range(event.after_episode + 1, scenario.episodes + 1):
            family = catalog.task_families.get(scenario.family(episode))
            if family is not None and family.klass == scenario.compliance_class:
                slots.append(episode)
                break
    return sorted(set(slots))


def verify_domain(scenario: Scenario) -> DomainCatalog:
    """Load the domain ``scenario`` names (shipped name, entry point or import path) and check the
    manifest against it; a ``ScenarioError`` names what is wrong."""
    from ..domains import DomainError, get_catalog

    try:
        catalog = get_catalog(scenario.domain)
    except DomainError as exc:
        raise ScenarioError(f"{scenario.name}: {exc}") from exc
    check_scenario(scenario, catalog)
    return catalog


def resolve_scenario(name_or_path: str | Path) -> Scenario:
    """``load_scenario``, then ``verify_domain``: a manifest naming an unknown domain, family,
    snapshot or rule set fails here, before anything runs."""
    scenario = load_scenario(name_or_path)
    verify_domain(scenario)
    return scenario


def check_scenario(scenario: Scenario, catalog: DomainCatalog) -> None:
    """Refuse a manifest whose schedule or drift refers to anything the domain lacks, whose drift
    labels the oracle contradicts (``labels.check_labels``), or whose stale slots are not the
    paper's (an extra exclusion belongs in a ``[[departures]]`` table)."""
    classes = {family.klass for family in catalog.task_families.values()}
    if scenario.compliance_class not in classes:
        raise ScenarioMismatch(
            f"{scenario.name}: compliance class {scenario.compliance_class!r} is not a task class "
            f"of {scenario.domain} ({sorted(classes)})"
        )
    missing = sorted({f for f in scenario.schedule if f not in catalog.task_families})
    if missing:
        raise ScenarioMismatch(
            f"{scenario.name}: unknown task families {missing}; {scenario.domain} has "
            f"{sorted(catalog.task_families)}"
        )
    for event in scenario.drift:
        for part in event.table_drifts():
            if part.snapshot not in catalog.snapshots:
                raise ScenarioMismatch(
                    f"{scenario.name}: no snapshot {part.snapshot!r} in {scenario.domain}; "
                    f"known: {sorted(catalog.snapshots)}"
                )
            if part.table not in catalog.domain.tables:
                raise ScenarioMismatch(
                    f"{scenario.name}: {scenario.domain} has no table {part.table!r}"
                )
        if event.rules is not None and event.rules not in catalog.rule_sets:
            raise ScenarioMismatch(
                f"{scenario.name}: no rule set {event.rules!r} in {scenario.domain}; "
                f"known: {sorted(catalog.rule_sets)}"
            )
    wrong = check_labels(scenario, catalog)
    if wrong:
        raise ScenarioMismatch(f"{scenario.name}: {wrong[0]}")
    expected = paper_stale_slots(scenario, catalog)
    extra = sorted(set(scenario.stale_slots) - set(expected))
    if extra:
        raise ScenarioMismatch(
            f"{scenario.name}: stale slots {extra} are not the first {scenario.compliance_class} "
            f"episode after a breaking event (the paper's slots here: {expected}); declare "
            "other exclusions as a [[departures]] entry with a reason"
        )
    if set(expected) - set(scenario.stale_slots):
        raise ScenarioMismatch(
            f"{scenario.name}: stale_slots must list {expected} (the first "
            f"{scenario.compliance_class} episode after each breaking event)"
        )
