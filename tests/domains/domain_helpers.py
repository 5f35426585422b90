"""Helpers the domain tests share (conftest puts this directory on sys.path)."""

from invalidation_contracts.protocol import Suggestion
from invalidation_contracts.server import Provider


def ask(catalog, payload, registry=None):
    """Send ``payload`` to the catalog's route; returns (status, suggestions, wire body)."""
    provider = Provider(
        catalog.domain, registry if registry is not None else catalog.domain.registry()
    )
    outcome = provider.handle(catalog.route, payload)
    body = outcome.body.to_wire()
    raw = (body.get("recovery_feedback") or {}).get("suggestions", [])
    return outcome.status, [Suggestion.model_validate(s) for s in raw], body


def first_fix(catalog, family_id, registry=None):
    """The single suggestion a family's draft draws (asserting there is exactly one)."""
    status, suggestions, _ = ask(catalog, catalog.family(family_id).draft(), registry)
    assert status == 422 and len(suggestions) == 1, suggestions
    return suggestions[0]


def applied(draft, suggestion):
    """``draft`` with the suggestion's parameters merged in, as a planner would apply it."""
    return {**draft, **suggestion.parameters}


def load(registry, catalog, snapshot):
    """Reload the table a snapshot names from that snapshot; returns the ReloadResult."""
    file = catalog.read_snapshot(snapshot)
    return registry.reload(file.table, file.rows, file.version)


def dependency_keys(suggestion):
    return {(d.table, key) for d in suggestion.tables or () for key in d.keys or ()}


def longest_chain(listing):
    """The number of edges on the longest path without a repeated node in a graph listing."""
    out = {}
    for edge in listing.edges:
        out.setdefault(edge.from_, set()).add(edge.to)

    def walk(node, seen):
        return max((1 + walk(n, seen | {n}) for n in out.get(node, ()) if n not in seen), default=0)

    return max((walk(node, {node}) for node in out), default=0)
