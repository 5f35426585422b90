"""Preflight probes from a domain's own task families (``preflight --domain``).

The built-in probes of :mod:`..planners.preflight` are synthetic; these ask the domain's server
what each family's draft needs and put that known-valid fix in memory, so the preflight measures
compliance on the tasks and hint shapes the domain's streams will run.
"""

from __future__ import annotations

from ..domains.catalog import DomainCatalog
from ..planners.preflight import Probe
from ..server import Provider


class NoProbes(ValueError):
    """A domain none of whose task families draws a cacheable fix."""


def domain_probes(catalog: DomainCatalog) -> tuple[Probe, ...]:
    """One probe per task family whose draft draws its expected fix as a cacheable suggestion.

    Families that draw no fix (no-constraint), or whose expected fix is not cacheable, are left
    out. The fix is what the domain's server answers for the draft on its initial tables.
    """
    provider = Provider(catalog.domain, catalog.domain.registry())
    probes = []
    for family in catalog.task_families.values():
        if family.expected_fix_type is None:
            continue
        outcome = provider.handle(catalog.route_of(family), family.draft())
        feedback = getattr(outcome.body, "recovery_feedback", None)
        suggestions = feedback.suggestions if feedback is not None else []
        fix = next(
            (
                s
                for s in suggestions
                if s.type == family.expected_fix_type
                and s.cache_hint is not None
                and s.cache_hint.value == "cacheable"
            ),
            None,
        )
        if fix is not None:
            probes.append(Probe(family.id, family.text, family.draft(), fix))
    if not probes:
        raise NoProbes(f"domain {catalog.name!r}: no task family draws a cacheable fix to probe")
    return tuple(probes)
