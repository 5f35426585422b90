"""Per-run scoring: ``run_metrics`` reads one run's metadata and records into a ``RunMetrics``,
one helper per concern (identity, episodes, compliance, drift, evictions, tokens and wire)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..artifacts import Run, RunKey
from ._numbers import mean, ratio
from .drift import DriftWindow, drift_events, windows
from .order import action_rank, arm_rank, class_rank
from .wire_totals import WireTotals


@dataclass(frozen=True, slots=True)
class RunMetrics:
    """Every metric of one run."""

    scenario: str
    planner: str
    arm: str
    arm_code: str
    seed: int
    detection: str
    apply_mode: str
    level: int
    simulated: bool
    planner_served: str | None
    package_version: str
    episodes: int
    """Episodes the scenario schedules."""
    stale_slots: tuple[int, ...]
    departure_slots: tuple[int, ...]
    """Episodes excluded from compliance by a manifest departure (not the paper's rule)."""
    departure_reasons: tuple[str, ...]
    episodes_recorded: int
    completed_episodes: int
    """Episodes that ended on a faithful accepted request."""
    completed_unfaithful: int
    """Episodes that ended on an accepted request that is not faithful to the task."""
    planner_errors: int
    """Attempts whose planner reply was unusable."""
    compliance_class: str
    compliance: float | None
    compliance_eligible: int
    compliance_first_try: int
    eligible_first_try: float | None
    """Compliance's rate, defined at A0 too (Figure 3's bars)."""
    first_try: int
    """Count of first-try episodes over the whole stream."""
    first_try_by_class: dict[str, float | None]
    episodes_by_class: dict[str, int]
    class_actions: dict[str, str]
    """Each class's hint shape (episode ``action``); classes without one are left out."""
    drift_reached_classes: tuple[str, ...]
    """Classes whose injected fixes a drift event evicted or restamped (Table 7's columns)."""
    first_try_by_action: dict[str, float | None]
    post_drift_funding: float | None
    post_drift_funding_episodes: int
    pre_drift_funding: float | None
    pre_drift_funding_episodes: int
    targeted_class: str | None
    targeted_first_try: float | None
    attempts: int
    retries: int
    evictions: int
    evictions_correct: int
    evictions_wrong: int
    evictions_unlabelled: int
    evictions_cascaded_from_wrong: int
    """Consumer evictions (A2DC) that followed, directly or through another consumer, an eviction
    the oracle judged wrong: the arm cannot tell a wrong eviction from a correct one, so it
    cascades from both; counted apart so a report can say so."""
    restamps: int
    precision: float | None
    recall: float | None
    stale_entries: int
    stale_entries_evicted: int
    injections: int
    stale_injections: int
    stale_injections_outside_slots: int
    alerts: int
    drift: tuple[DriftWindow, ...]
    tokens_in: int
    tokens_out: int
    tokens_estimated: bool
    wire: WireTotals
    conditional: bool = False
    """Whether the client sent ``Contract-Since`` (the conditional contract, ext)."""
    command: str | None = None
    contract_tokens: int = 0
    """Estimated input tokens the model was not shown: the contract metadata of responses."""
    transport: str | None = None
    """How the run reached the provider (``AsyncContractTransport``, or an MCP session)."""
    stale_values_sent: int | None = None
    """Stale values sent: the fixes a change had made stale whose values an episode's opening
    request carried (the episode records' ``stale_sent``, judged by the oracle from what was
    sent) — what a provider can see; ``stale_injections`` is what the model was shown. None for
    artifacts recorded before the field."""
    probes: int = 0
    """Probe calls: requests a contract-less policy sent without a doubted fix (``probe``), and
    reads of a resource a fix cites, its validator and conditional reads (``revalidate``)."""

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    @property
    def key(self) -> RunKey:
        return RunKey(
            self.scenario, self.planner, self.arm, self.seed, self.detection, self.apply_mode
        )

    @property
    def rules_stream(self) -> bool:
        return any(w.rules for w in self.drift)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["wire"] = self.wire.to_json()
        data["tokens"] = self.tokens
        return data


def _stale_slots(run: Run, episodes: Sequence[Mapping[str, Any]]) -> frozenset[int]:
    slots = run.meta.extra.get("stale_slots")
    if slots is not None:
        return frozenset(int(s) for s in slots)
    return frozenset(int(e["episode"]) for e in episodes if e.get("stale_slot"))


def is_faithful(episode: Mapping[str, Any]) -> bool:
    """An episode record's ``faithful`` flag; records written before it existed are faithful."""
    return episode.get("faithful") is not False


def is_completed(episode: Mapping[str, Any]) -> bool:
    """Completed: ended on an accepted request that is faithful to the task."""
    return bool(episode.get("completed")) and is_faithful(episode)


def is_first_try(episode: Mapping[str, Any]) -> bool:
    """First-try: accepted on attempt 1, and faithful."""
    return bool(episode.get("first_try")) and is_faithful(episode)


def _rate(episodes: Sequence[Mapping[str, Any]]) -> float | None:
    return mean([1.0 if is_first_try(e) else 0.0 for e in episodes])


def _by(
    episodes: Sequence[Mapping[str, Any]], field_name: str
) -> dict[str, list[Mapping[str, Any]]]:
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for e in episodes:
        if e.get(field_name) is not None:
            groups[str(e[field_name])].append(e)
    return groups


def _recall(run: Run, memory: list[dict[str, Any]]) -> tuple[int, int]:
    """(entries that went stale, those of them evicted in the same or a later episode)."""
    went_stale: dict[str, int] = {}
    for r in run.of("stale"):
        entry, episode = str(r["entry"]), int(r.get("episode", 0))
        if entry not in went_stale or episode < went_stale[entry]:
            went_stale[entry] = episode
    evicted = {
        entry
        for m in memory
        if m.get("event") == "evict"
        and (entry := str(m.get("entry"))) in went_stale
        and int(m.get("episode", 0)) >= went_stale[entry]
    }
    return len(went_stale), len(evicted)


def _departures(run: Run) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The manifest's departures recorded in the metadata: (episodes, reasons)."""
    episodes: set[int] = set()
    reasons: list[str] = []
    for departure in run.meta.extra.get("departures") or ():
        episodes.update(int(e) for e in departure.get("episodes", ()))
        reasons.append(str(departure.get("reason", "")))
    return tuple(sorted(episodes)), tuple(reasons)


def _class_actions(episodes: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    actions: dict[str, Counter[str]] = defaultdict(Counter)
    for e in episodes:
        if e.get("action") is not None:
            actions[str(e.get("klass"))][str(e["action"])] += 1
    return {
        k: counts.most_common(1)[0][0]
        for k, counts in sorted(actions.items(), key=lambda kv: class_rank(kv[0]))
    }


def _drift_reached(
    episodes: Sequence[Mapping[str, Any]], memory: Sequence[Mapping[str, Any]], first_drift: int
) -> tuple[str, ...]:
    """Classes in whose episodes an entry was injected that a drift event later evicted or
    restamped: the classes a drift reaches, whichever episode first learned the entry."""
    klass = {int(e["episode"]): str(e.get("klass")) for e in episodes}
    injected_in: dict[str, set[str]] = defaultdict(set)
    for m in memory:
        if m.get("event") == "inject" and int(m.get("episode", 0)) in klass:
            injected_in[str(m.get("entry"))].add(klass[int(m["episode"])])
    reached = {
        k
        for m in memory
        if m.get("event") in ("evict", "restamp") and int(m.get("episode", 0)) > first_drift
        for k in injected_in.get(str(m.get("entry")), ())
    }
    return tuple(sorted(reached, key=class_rank))


def _cascaded_from_wrong(evicts: Sequence[Mapping[str, Any]]) -> int:
    """Consumer evictions descending from an eviction the oracle judged wrong (in record order)."""
    tainted = {str(m.get("entry")) for m in evicts if m.get("stale") is False}
    count = 0
    for m in evicts:
        parent = m.get("cascaded_from")
        if parent is not None and str(parent) in tainted:
            tainted.add(str(m.get("entry")))
            count += 1
    return count


def _identity(run: Run) -> dict[str, Any]:
    """Which run this is and how it ran: its key, planner, level and provenance."""
    meta, key = run.meta, run.meta.key
    return {
        "scenario": key.scenario,
        "planner": key.planner,
        "arm": key.arm,
        "arm_code": str(meta.extra.get("arm_code") or key.arm),
        "seed": key.seed,
        "detection": key.detection,
        "apply_mode": key.apply_mode,
        "level": meta.level,
        "simulated": meta.planner_simulated,
        "planner_served": meta.planner_served,
        "package_version": meta.package_version,
        "episodes": meta.episodes,
        "conditional": bool(meta.extra.get("conditional")),
        "command": meta.extra.get("command"),
        "transport": meta.extra.get("transport"),
    }


def _episode_counts(
    episodes: Sequence[Mapping[str, Any]], attempts: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """Completion, first tries and retries over the whole stream."""
    return {
        "episodes_recorded": len(episodes),
        "completed_episodes": sum(1 for e in episodes if is_completed(e)),
        "completed_unfaithful": sum(
            1 for e in episodes if e.get("completed") and not is_faithful(e)
        ),
        "planner_errors": sum(1 for a in attempts if a.get("planner_error")),
        "first_try": sum(1 for e in episodes if is_first_try(e)),
        "attempts": sum(int(e.get("attempts") or 0) for e in episodes),
        "retries": sum(max(int(e.get("attempts") or 0) - 1, 0) for e in episodes),
        "stale_values_sent": (
            sum(len(e.get("stale_sent") or ()) for e in episodes)
            if any("stale_sent" in e for e in episodes)
            else None
        ),
    }


def _compliance(
    run: Run, episodes: Sequence[Mapping[str, Any]], slots: frozenset[int]
) -> dict[str, Any]:
    """DEFINITIONS "Compliance": first tries of the governed class outside the excluded slots."""
    meta, key = run.meta, run.meta.key
    departure_slots, departure_reasons = _departures(run)
    governed_class = meta.extra.get("compliance_class", "governed")
    governed = [e for e in episodes if e.get("klass") == governed_class]
    excluded = slots | set(departure_slots)
    eligible = [e for e in governed if int(e["episode"]) not in excluded]
    compliance_hits = sum(1 for e in eligible if is_first_try(e))
    eligible_rate = ratio(compliance_hits, len(eligible))
    return {
        "stale_slots": tuple(sorted(slots)),
        "departure_slots": departure_slots,
        "departure_reasons": departure_reasons,
        "compliance_class": governed_class,
        "compliance": None if key.arm == "none" else eligible_rate,
        "compliance_eligible": len(eligible),
        "compliance_first_try": compliance_hits,
        "eligible_first_try": eligible_rate,
    }


def _by_class(
    episodes: Sequence[Mapping[str, Any]],
    memory: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
    slots: frozenset[int],
) -> dict[str, Any]:
    """First tries by constraint class and hint shape, around the drift and in the stale slots."""
    by_class = _by(episodes, "klass")
    by_action = _by(episodes, "action")
    last_drift = events[-1]["after_episode"] if events else None
    funding = by_class.get("funding", [])
    post_funding = [e for e in funding if last_drift is not None and int(e["episode"]) > last_drift]
    pre_funding = [e for e in funding if last_drift is not None and int(e["episode"]) <= last_drift]
    slot_classes = Counter(str(e.get("klass")) for e in episodes if int(e["episode"]) in slots)
    targeted = min(slot_classes, key=lambda k: (-slot_classes[k], k)) if slot_classes else None
    return {
        "first_try_by_class": {
            k: _rate(v) for k, v in sorted(by_class.items(), key=lambda kv: class_rank(kv[0]))
        },
        "episodes_by_class": {
            k: len(v) for k, v in sorted(by_class.items(), key=lambda kv: class_rank(kv[0]))
        },
        "class_actions": _class_actions(episodes),
        "drift_reached_classes": (
            _drift_reached(episodes, memory, events[0]["after_episode"]) if events else ()
        ),
        "first_try_by_action": {
            k: _rate(v) for k, v in sorted(by_action.items(), key=lambda kv: action_rank(kv[0]))
        },
        "post_drift_funding": _rate(post_funding),
        "post_drift_funding_episodes": len(post_funding),
        "pre_drift_funding": _rate(pre_funding),
        "pre_drift_funding_episodes": len(pre_funding),
        "targeted_class": targeted,
        "targeted_first_try": _rate(by_class.get(targeted, [])) if targeted else None,
    }


def _memory(run: Run, memory: list[dict[str, Any]], slots: frozenset[int]) -> dict[str, Any]:
    """Evictions judged by the oracle, restamps, recall of stale entries, injections and alerts."""
    evicts = [m for m in memory if m.get("event") == "evict"]
    correct = sum(1 for m in evicts if m.get("stale") is True)
    wrong = sum(1 for m in evicts if m.get("stale") is False)
    stale_injected = [m for m in memory if m.get("event") == "inject" and m.get("stale") is True]
    stale_entries, stale_evicted = _recall(run, memory)
    return {
        "evictions": len(evicts),
        "evictions_correct": correct,
        "evictions_wrong": wrong,
        "evictions_unlabelled": len(evicts) - correct - wrong,
        "evictions_cascaded_from_wrong": _cascaded_from_wrong(evicts),
        "restamps": sum(1 for m in memory if m.get("event") == "restamp"),
        "precision": ratio(correct, correct + wrong),
        "recall": ratio(stale_evicted, stale_entries),
        "stale_entries": stale_entries,
        "stale_entries_evicted": stale_evicted,
        "injections": sum(1 for m in memory if m.get("event") == "inject"),
        "stale_injections": len(stale_injected),
        "stale_injections_outside_slots": sum(
            1 for m in stale_injected if int(m.get("episode", 0)) not in slots
        ),
        "alerts": sum(1 for m in memory if m.get("event") == "alert"),
        "probes": sum(1 for m in memory if m.get("event") in ("probe", "revalidate")),
    }


def _cost(run: Run, attempts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Tokens the planner spent and was spared, and the bytes on the wire."""
    return {
        "tokens_in": sum(int(a.get("tokens_in") or 0) for a in attempts),
        "tokens_out": sum(int(a.get("tokens_out") or 0) for a in attempts),
        "tokens_estimated": run.meta.planner_simulated
        or any(a.get("tokens_estimated") for a in attempts),
        "wire": WireTotals.of(attempts),
        "contract_tokens": sum(int(a.get("contract_tokens") or 0) for a in attempts),
    }


def run_metrics(run: Run) -> RunMetrics:
    """Score one run from its metadata and records."""
    episodes = sorted(run.of("episode"), key=lambda e: int(e["episode"]))
    attempts = list(run.of("attempt"))
    memory = list(run.of("memory"))
    slots = _stale_slots(run, episodes)
    events = drift_events(run)
    last_episode = int(episodes[-1]["episode"]) if episodes else 0
    return RunMetrics(
        **_identity(run),
        **_episode_counts(episodes, attempts),
        **_compliance(run, episodes, slots),
        **_by_class(episodes, memory, events, slots),
        **_memory(run, memory, slots),
        drift=windows(events, memory, attempts, last_episode, run.meta.key.detection),
        **_cost(run, attempts),
    )


def score(runs: Iterable[Run | RunMetrics]) -> list[RunMetrics]:
    """Run metrics for each run (already-scored runs pass through), in a stable order."""
    scored = [r if isinstance(r, RunMetrics) else run_metrics(r) for r in runs]
    return sorted(
        scored,
        key=lambda m: (m.scenario, m.planner, arm_rank(m.arm), m.detection, m.apply_mode, m.seed),
    )
