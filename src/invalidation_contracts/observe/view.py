"""What the operator page shows, as one JSON-ready document (sans-IO; read from memory only).

``operator_view`` gathers the worker's served state (epoch, seq, table versions), the journal's
recent change sets with their row diffs, this worker's readiness and lag, the per-client scores,
every worker's position and the totals over all of them (``observe.fleet``, from the merged
metrics exposition), and optionally the graph around one node (its out- and in-edges, at most
``max_edges`` each).
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from ..server.graph import node_id
from ..server.tables import thaw

if TYPE_CHECKING:
    from ..server.state import RegistryState
    from ..server.worker.contract import ContractWorker
    from .observability import Observability
    from .scoring import Scores

DEFAULT_CHANGES = 20
DEFAULT_CLIENTS = 50
MAX_EDGES = 100


def operator_view(
    observed: Observability,
    *,
    node: str | None = None,
    changes: int = DEFAULT_CHANGES,
    clients: int = DEFAULT_CLIENTS,
    max_edges: int = MAX_EDGES,
) -> dict[str, Any]:
    """The page's document for ``observed`` (an ``Observability``)."""
    service = observed.telemetry.service
    state = service.registry.state
    return {
        "epoch": state.epoch,
        "seq": state.seq,
        "level": int(service.level),
        "tables": [
            {
                "table": name,
                "version": snapshot.version,
                "rows": len(snapshot),
                "changed_at": state.changed_at.get(name, 0),
            }
            for name, snapshot in sorted(state.tables.items())
        ],
        "changes": [c.to_dict() for c in observed.telemetry.journal.recent(changes)],
        "worker": _worker(service, state.seq),
        "clients": _clients(observed.scores, clients),
        "fleet": _fleet(observed),
        "at": time.time(),
        "graph": None if not node else _graph(state, node, max_edges),
    }


def _worker(service: ContractWorker, seq: int) -> dict[str, Any]:
    health = service.health()
    return {
        "worker": str(os.getpid()),
        "available": bool(service.available),
        "live": bool(health.live),
        "ready": bool(health.ready),
        "state": str(health.state),
        "lag_s": round(float(health.lag_s), 3),
        "max_lag_s": float(health.max_lag_s),
        "leads": dict(health.leads),
        "reason": health.reason,
        "follows_shared_history": service.runtime.follower is not None,
        "seq": seq,
    }


def _fleet(observed: Observability) -> dict[str, Any] | None:
    """Every worker's position and the totals over all of them (None: no metrics exposition)."""
    if observed.prometheus is None:
        return None
    from .fleet import fleet

    return fleet(observed.prometheus.render().decode("utf-8"))


def _clients(scores: Scores | None, limit: int) -> list[dict[str, Any]]:
    if scores is None:
        return []
    snapshot = scores.snapshot()
    ranked = sorted(snapshot.items(), key=lambda item: (-item[1].requests, item[0]))[:limit]
    return [{"client": key, **figures.to_dict()} for key, figures in ranked]


def _graph(state: RegistryState, node: str, limit: int) -> dict[str, Any]:
    graph = state.graph
    table, _, key = node.partition(":")
    exists = table in state.tables and key in state.tables[table].rows
    out = sorted(graph.successors(node))[:limit]
    incoming: list[tuple[str, str]] = []
    for source_table in sorted(graph.out):
        for source_key, edges in sorted(graph.out[source_table].items()):
            for target, relation in edges:
                if target == node and len(incoming) < limit:
                    incoming.append((node_id(source_table, source_key), relation))
    return {
        "node": node,
        "exists": exists,
        "row": thaw(state.tables[table].rows[key]) if exists else None,
        "out": [{"to": target, "relation": relation} for target, relation in out],
        "in": [{"from": source, "relation": relation} for source, relation in incoming],
    }
