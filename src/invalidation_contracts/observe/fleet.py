"""Every worker at once, for the operator page: read from the merged metrics exposition.

At ``serve --workers N`` a page request reaches one worker, which answers every worker's series
(``observe.workers``); ``fleet`` turns that exposition into the page's rows: where each worker
stands (seq, readiness, time since it confirmed the head) and the provider's totals over all of
them (answers, the paper's client figures, change sets, clients forgotten). Sans-IO: text in,
a JSON-ready dict out.
"""

from __future__ import annotations

from typing import Any

from .._extras import missing

try:
    from prometheus_client.parser import text_string_to_metric_families
except ModuleNotFoundError as exc:
    raise missing(exc, "otel") from exc

PREFIX = "invalidation_contracts_"
_TOTALS = {
    "answers": "http_responses_total",
    "episodes": "clients_episodes_total",
    "first_try": "clients_first_try_total",
    "retries": "clients_retries_total",
    "stale_values_sent": "clients_stale_values_sent_total",
    "clients_forgotten": "clients_forgotten_total",
    "change_sets": "contract_changes_total",
    "rows_changed": "contract_rows_changed_total",
}
_WORKER = {
    "seq": "worker_seq",
    "ready": "worker_ready",
    "live": "worker_live",
    "available": "worker_available",
    "confirmation_age_s": "worker_confirmation_age_seconds",
    "adopted": "worker_adopted_changes_total",
}


def fleet(exposition: str) -> dict[str, Any]:
    """Each worker's position and the totals over every worker, from one exposition."""
    totals = dict.fromkeys(_TOTALS, 0.0)
    workers: dict[str, dict[str, Any]] = {}
    by_name = {PREFIX + name: key for key, name in _TOTALS.items()}
    per_worker = {PREFIX + name: key for key, name in _WORKER.items()}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            if sample.name in by_name:
                totals[by_name[sample.name]] += sample.value
            elif sample.name in per_worker:
                worker = sample.labels.get("worker", "")
                row = workers.setdefault(worker, {"worker": worker})
                row[per_worker[sample.name]] = sample.value
    episodes = totals["episodes"]
    return {
        "workers": [workers[name] for name in sorted(workers) if "seq" in workers[name]],
        "totals": {
            **{key: int(value) for key, value in totals.items()},
            "first_try_rate": totals["first_try"] / episodes if episodes else None,
        },
    }
