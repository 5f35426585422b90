"""Study — the learned policy's cost (issue 37): per observation and per lookup, against ``row``.

Two memories (in-memory store) hold the same ``N`` fixes, one per scope, of ``TYPES`` fix types:
``row`` (A2D) learned them from 422s with the contract (L1: ``cache_hint``, ``table``, stamps);
``learned`` (A1L) from the same 422s with no contract field, and has then seen every fix
confirmed once and one change per type (its learner holds ``N`` confirmation ticks and a change
per type: its largest state for these entries). Medians over repeats, in one run:

- *observe*: a 422 teaching one held fix again (the restamp path; the learner records a
  confirmation);
- *lookup*: ``FixMemory.lookup`` for one draft (the learner judges the served entry).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from invalidation_contracts.client.limits import Limits
from invalidation_contracts.client.memory import FixMemory
from invalidation_contracts.client.values import Observed

from .common import Check, StudyResult, markdown_table, median, time_calls

NAME = "learned"
TITLE = "Learned policy cost: per observation and per lookup, against row"
ORIGIN = "https://api.example.test"
TYPES = 10
BATCH = 100
TARGET = 1.2
FULL_N, QUICK_N = 10_000, 500
FULL_REPEATS, QUICK_REPEATS = 300, 20


def suggestion(i: int, contract: bool, value: str = "a") -> dict[str, Any]:
    fix: dict[str, Any] = {
        "type": f"T{i % TYPES}",
        "parameters": {"code": value},
        "action": "rewrite_value",
        "scope": {"k": i},
    }
    if contract:
        fix.update(cache_hint="cacheable", table="codes")
    return fix


def body(fixes: list[dict[str, Any]], contract: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "urn:x:policy-violation",
        "title": "x",
        "status": 422,
        "recovery_feedback": {"suggestions": fixes},
    }
    if contract:
        out.update(table_versions={"codes": "1"}, contract_seq=1, contract_epoch="bench")
    return out


def filled(strategy: str, n: int) -> FixMemory:
    contract = strategy == "row"
    memory = FixMemory(strategy, limits=Limits(max_suggestions=BATCH, max_entries_per_origin=10**7))
    rounds = 2 if not contract else 1  # learned: taught, then confirmed (every entry checked)
    for episode in range(1, rounds + 1):
        for start in range(0, n, BATCH):
            fixes = [suggestion(i, contract) for i in range(start, min(n, start + BATCH))]
            memory.observe(
                ORIGIN,
                Observed(status=422, body=body(fixes, contract), request=None),
                episode=episode,
            )
    if not contract:
        for t in range(TYPES):  # one change per type, each refuting one entry (then re-taught)
            memory.observe(
                ORIGIN,
                Observed(status=422, body=body([suggestion(t, False, "b")], False), request=None),
                episode=3,
            )
    return memory


def _measure(n: int, repeats: int) -> dict[str, dict[str, float]]:
    """Median seconds of one observe and one lookup on each memory of ``n`` entries, the two
    memories' calls interleaved so a change of load weighs on both alike."""
    calls: dict[str, dict[str, Any]] = {}
    for strategy in ("row", "learned"):
        memory = filled(strategy, n)
        contract = strategy == "row"
        again = Observed(
            status=422, body=body([suggestion(n // 2, contract)], contract), request=None
        )
        draft = {"k": n // 2 + 1}
        calls[strategy] = {
            "observe": lambda m=memory, a=again: m.observe(ORIGIN, a, episode=4),
            "lookup": lambda m=memory, d=draft: m.lookup(ORIGIN, d, episode=4),
        }
        calls[strategy]["lookup"]()  # the learned memory probes its doubted fix once first
        if not memory.lookup(ORIGIN, draft, episode=4).entries:
            raise AssertionError(f"{strategy}: the lookup served nothing")
    times: dict[str, dict[str, list[float]]] = {s: {"observe": [], "lookup": []} for s in calls}
    for _ in range(repeats):
        for op in ("observe", "lookup"):
            for strategy in calls:
                times[strategy][op] += time_calls(calls[strategy][op], repeats=1)
    return {
        s: {"observe": median(t["observe"]), "lookup": median(t["lookup"]), "entries": n}
        for s, t in times.items()
    }


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    n = QUICK_N if quick else FULL_N
    repeats = QUICK_REPEATS if quick else FULL_REPEATS
    results = _measure(n, repeats)
    ratios = {op: results["learned"][op] / results["row"][op] for op in ("observe", "lookup")}
    rows = [
        [
            op,
            f"{results['row'][op] * 1e6:.1f}",
            f"{results['learned'][op] * 1e6:.1f}",
            f"{ratios[op]:.2f}×",
        ]
        for op in ("observe", "lookup")
    ]
    markdown = (
        f"{n:,} entries, medians of {repeats} calls (the two memories' calls interleaved), "
        "in-memory store, one run.\n\n"
        + markdown_table(["call", "row (µs)", "learned (µs)", "learned / row"], rows)
    )
    checks = [
        Check(
            f"learned {op} ≤ {TARGET}× row at {n:,} entries",
            f"{ratios[op]:.2f}×",
            ratios[op] <= TARGET,
        )
        for op in ("observe", "lookup")
    ]
    return StudyResult(NAME, TITLE, markdown, checks, data={"results": results, "ratios": ratios})
