"""The paper's metrics, computed from run artifacts alone, so a report is rebuilt without rerunning.

``run_metrics`` scores one run, ``aggregate`` pools runs into grid cells (one per scenario, planner,
arm, detection and apply mode) as a mean over seeds, and ``summary_json`` is both for machines.
Every definition is pre-registered; they are listed in ``DEFINITIONS`` (rendered into the report's
"Definitions" section and appended to this docstring at import).
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .artifacts import Run, RunKey, read_runs

#: The strategies in ladder order (descriptive names); unknown arms sort after them by name.
ARM_ORDER = (
    "none",
    "naive",
    "table",
    "row",
    "row+consumers",
    "row+graph",
    "rules-oracle",
    "rules-stamp",
    "rules-stamp+vectors",
)
#: Table 5's baseline: lazy (failure-gated) detection with consumer notification.
LAZY_REFERENCE = ("row+consumers", "lazy")
#: Class order in tables; other classes follow by name.
CLASS_ORDER = ("governed", "funding", "negative_control", "no_constraint")
#: Marks a simulated planner wherever a planner is named in a table or figure.
SIMULATED_MARK = "†"
#: Hint shapes (episode ``action``) in Table 7's order.
ACTION_ORDER = ("add_field", "rewrite_value", "conditional_rewrite")

DEFINITIONS: tuple[tuple[str, str], ...] = (
    (
        "Compliance",
        (
            "first-try rate over the injection-eligible episodes of the governed class (the "
            'manifest\'s `compliance_class`, `klass == "governed"` by default; `celiac` on the '
            "recipe stream): every episode of that class except the pre-registered stale slots "
            "(the manifest's `stale_slots`, or the episodes flagged `stale_slot` when the "
            "metadata lacks them), the paper's rule (§4.1). An exclusion beyond the stale slots "
            "must be pre-registered as a manifest `departures` entry, and every table that uses "
            "it says so. Undefined (–) at A0 (`none`) and when no episode is eligible."
        ),
    ),
    (
        "Governed first-try",
        (
            "the same first-try rate over the same eligible episodes, defined at every arm: at A0 "
            "it is the zero floor of §6.2 (Figure 3 plots it, so A0 is drawn)."
        ),
    ),
    (
        "Completed and faithful",
        (
            "an episode is completed only when it ended on an accepted request that is faithful "
            "to the task (the episode record's `faithful`: the task's fields, changed only where "
            "a received or injected fix says so); an accepted but unfaithful episode is counted "
            "as `completed unfaithful`, never as completed or first-try. Records without "
            "`faithful` are faithful."
        ),
    ),
    (
        "Planner failures",
        (
            "attempts whose record carries `planner_error` (the planner's reply was unusable); "
            "each counts against `max_attempts` like a rejected request."
        ),
    ),
    (
        "First-try per class",
        "mean of first-try (faithful) over the episodes of each `klass`.",
    ),
    (
        "Retries",
        (
            "Σ (attempts − 1) over episodes; an episode that does not complete counts all its "
            "attempts (max_attempts − 1 retries)."
        ),
    ),
    (
        "Evictions",
        (
            "`memory` records with event `evict`; correct = oracle label `stale == true`, wrong = "
            "`stale == false`, unlabelled = no label (shown separately, never counted as either). "
            "Precision = correct / (correct + wrong), undefined with no labelled eviction."
        ),
    ),
    (
        "Recall",
        (
            "(entries with a `stale` record that have an `evict` event in the same or a later "
            "episode) / (entries with a `stale` record); undefined when no entry went stale."
        ),
    ),
    (
        "Restamps",
        "count of `memory` records with event `restamp`.",
    ),
    (
        "Per drift event",
        (
            "evictions and restamps counted over the episodes after that drift event's "
            "`after_episode` up to and including the next drift event's `after_episode`."
        ),
    ),
    (
        "Alert",
        (
            "per rule event, the episode in which the arm first learns that the rules changed: "
            "its first `alert` record (an arm that reads the L6 stamp on every response); for a "
            "failure-gated (lazy) arm that records no alert, the first rejected response after "
            "the event whose `rules_version` differs from the one before it, which is the failure "
            "the paper's lazy arm detects the change on (§6.3). Undefined when neither happens."
        ),
    ),
    (
        "Stale injections",
        ("`inject` events with `stale == true`; also counted separately outside the stale slots."),
    ),
    (
        "Completed episodes",
        (
            "episodes completed (faithful, as above); shown beside every event count, because a "
            "run that exhausts its retries reaches fewer drift events and can imitate a precise "
            "one (§4.1)."
        ),
    ),
    (
        "Tokens",
        (
            "input and output tokens summed over attempts; `est.` marks estimates (simulated "
            "planners)."
        ),
    ),
    (
        "Contract tokens kept from the model",
        (
            "input tokens the planner was spared because it is shown responses without their "
            "contract metadata (`client.modelview`): per attempt, the estimated tokens of its "
            "prompt with the earlier responses as received minus those of the prompt it was "
            "shown, summed over attempts. Always an estimate (four characters a token), for real "
            "planners too; the memory still reads the whole response."
        ),
    ),
    (
        "Token saving",
        (
            "1 − tokens(arm) / tokens(A0) for the same scenario, planner and seed (an A0 run with "
            "the same detection and apply mode if there is one; A0 keeps no memory, so they "
            "change nothing), averaged over seeds; undefined without an A0 run. Tokens = input + "
            "output."
        ),
    ),
    (
        "Δ tokens vs lazy",
        (
            "tokens(arm) / tokens(lazy `row+consumers`) − 1 for the same scenario, planner, seed "
            "and apply mode, averaged over seeds (Table 5)."
        ),
    ),
    (
        "Wire cost",
        (
            "over all responses pooled: mean response bytes, mean contract bytes "
            "(`contract_bytes`), overhead = Σ contract bytes / Σ response bytes, split into the "
            "envelope (`envelope_bytes`) and the per-suggestion fields (`suggestion_bytes`); the "
            "same over the responses that carry suggestions; and the largest contract bytes of "
            "one response. The project's contract is every contract member (extensions and, at "
            "L4+, dependency vectors included); the paper's L1 fields (`paper_contract_bytes`) "
            "are `table_versions`, `cache_hint` and `table` only."
        ),
    ),
    (
        "Post-drift funding",
        (
            'first-try rate on `klass == "funding"` episodes after the last drift event\'s '
            "`after_episode` (the benign bump on the payments stream); pre-drift funding is the "
            "funding episodes up to it (Table 7's pre / post)."
        ),
    ),
    (
        "Drift-targeted class",
        (
            "the most common class among the pre-registered stale-slot episodes; its first-try "
            "rate is Figure 6's measure."
        ),
    ),
    (
        "Aggregation",
        (
            "per cell (scenario, planner, arm, detection, apply mode): the mean over seeds of "
            "each run's value, the sample standard deviation (n − 1; undefined for one seed), and "
            "the number of seeds where the value is defined. Wire cost pools responses instead."
        ),
    ),
)

__doc__ = (
    (__doc__ or "")
    + "\nDefinitions:\n\n"
    + "\n".join(f"* {name}: {text}" for name, text in DEFINITIONS)
)


def arm_rank(arm: str) -> tuple[int, str]:
    """Sort key putting arms in ladder order."""
    return (ARM_ORDER.index(arm), "") if arm in ARM_ORDER else (len(ARM_ORDER), arm)


def class_rank(klass: str) -> tuple[int, str]:
    """Sort key putting constraint classes in table order."""
    return (CLASS_ORDER.index(klass), "") if klass in CLASS_ORDER else (len(CLASS_ORDER), klass)


def action_rank(action: str) -> tuple[int, str]:
    return (
        (ACTION_ORDER.index(action), "") if action in ACTION_ORDER else (len(ACTION_ORDER), action)
    )


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass(frozen=True, slots=True)
class WireTotals:
    """Byte sums over responses; adding two pools them, so cells and levels are measured alike."""

    responses: int = 0
    response_bytes: int = 0
    contract_bytes: int = 0
    envelope_bytes: int = 0
    suggestion_bytes: int = 0
    max_contract_bytes: int = 0
    with_suggestions: int = 0
    with_suggestions_response_bytes: int = 0
    with_suggestions_contract_bytes: int = 0
    paper_measured: int = 0
    """Responses whose record carries the paper's L1 field bytes (``paper_contract_bytes``)."""
    paper_response_bytes: int = 0
    paper_contract_bytes: int = 0
    paper_envelope_bytes: int = 0
    max_paper_contract_bytes: int = 0

    @classmethod
    def of(cls, attempts: Iterable[Mapping[str, Any]]) -> WireTotals:
        total = cls()
        for a in attempts:
            if a.get("response_bytes") is None:
                continue  # no response (the planner's reply was unusable)
            response = int(a.get("response_bytes") or 0)
            contract = int(a.get("contract_bytes") or 0)
            carries = bool(a.get("suggestion_types"))
            paper = a.get("paper_contract_bytes")
            total = total + cls(
                responses=1,
                response_bytes=response,
                contract_bytes=contract,
                envelope_bytes=int(a.get("envelope_bytes") or 0),
                suggestion_bytes=int(a.get("suggestion_bytes") or 0),
                max_contract_bytes=contract,
                with_suggestions=int(carries),
                with_suggestions_response_bytes=response if carries else 0,
                with_suggestions_contract_bytes=contract if carries else 0,
                paper_measured=int(paper is not None),
                paper_response_bytes=response if paper is not None else 0,
                paper_contract_bytes=int(paper or 0),
                paper_envelope_bytes=int(a.get("paper_envelope_bytes") or 0),
                max_paper_contract_bytes=int(paper or 0),
            )
        return total

    def __add__(self, other: WireTotals) -> WireTotals:
        return WireTotals(
            **{
                name: max(getattr(self, name), getattr(other, name))
                if name.startswith("max_")
                else getattr(self, name) + getattr(other, name)
                for name in self.__dataclass_fields__
            }
        )

    @property
    def mean_response_bytes(self) -> float | None:
        return _ratio(self.response_bytes, self.responses)

    @property
    def mean_contract_bytes(self) -> float | None:
        return _ratio(self.contract_bytes, self.responses)

    @property
    def mean_envelope_bytes(self) -> float | None:
        return _ratio(self.envelope_bytes, self.responses)

    @property
    def mean_suggestion_bytes(self) -> float | None:
        return _ratio(self.suggestion_bytes, self.responses)

    @property
    def overhead(self) -> float | None:
        """Σ contract bytes / Σ response bytes."""
        return _ratio(self.contract_bytes, self.response_bytes)

    @property
    def envelope_share(self) -> float | None:
        return _ratio(self.envelope_bytes, self.response_bytes)

    @property
    def suggestion_share(self) -> float | None:
        return _ratio(self.suggestion_bytes, self.response_bytes)

    @property
    def mean_contract_bytes_with_suggestions(self) -> float | None:
        return _ratio(self.with_suggestions_contract_bytes, self.with_suggestions)

    @property
    def overhead_with_suggestions(self) -> float | None:
        return _ratio(self.with_suggestions_contract_bytes, self.with_suggestions_response_bytes)

    @property
    def paper_overhead(self) -> float | None:
        """The paper's L1 fields over the responses that recorded them: Σ field bytes / Σ bytes."""
        return _ratio(self.paper_contract_bytes, self.paper_response_bytes)

    @property
    def mean_paper_contract_bytes(self) -> float | None:
        return _ratio(self.paper_contract_bytes, self.paper_measured)

    @property
    def paper_envelope_share(self) -> float | None:
        """``table_versions`` alone, as a share of the response bytes."""
        return _ratio(self.paper_envelope_bytes, self.paper_response_bytes)

    @property
    def mean_paper_envelope_bytes(self) -> float | None:
        return _ratio(self.paper_envelope_bytes, self.paper_measured)

    @property
    def paper_suggestion_share(self) -> float | None:
        """``cache_hint`` and ``table`` together, as a share of the response bytes."""
        return _ratio(
            self.paper_contract_bytes - self.paper_envelope_bytes, self.paper_response_bytes
        )

    @property
    def mean_paper_suggestion_bytes(self) -> float | None:
        return _ratio(self.paper_contract_bytes - self.paper_envelope_bytes, self.paper_measured)

    def to_json(self) -> dict[str, Any]:
        derived = (
            "mean_response_bytes",
            "mean_contract_bytes",
            "mean_envelope_bytes",
            "mean_suggestion_bytes",
            "overhead",
            "envelope_share",
            "suggestion_share",
            "mean_contract_bytes_with_suggestions",
            "overhead_with_suggestions",
            "paper_overhead",
            "mean_paper_contract_bytes",
            "paper_envelope_share",
            "mean_paper_envelope_bytes",
            "paper_suggestion_share",
            "mean_paper_suggestion_bytes",
        )
        return {**asdict(self), **{name: getattr(self, name) for name in derived}}


@dataclass(frozen=True, slots=True)
class DriftWindow:
    """What a run did between one drift event and the next. Events applied after the same
    episode are one window (``_change_sets``): nothing runs between them to tell them apart."""

    after_episode: int
    kind: str
    target: str
    rules: bool
    until_episode: int | None
    """The next event's ``after_episode`` (the window's last episode); None for the last event."""
    reached: bool
    """Whether the run recorded any episode after the event."""
    evictions: int
    evictions_correct: int
    evictions_wrong: int
    restamps: int
    alert: int | None
    """Rule events: the episode the arm first learned the rules changed (DEFINITIONS "Alert")."""


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


def drift_events(run: Run) -> list[dict[str, Any]]:
    """The run's drift events in order: the manifest's (``extra["drift"]``), else the records."""
    manifest = run.meta.extra.get("drift")
    if manifest is not None:
        events = []
        for e in manifest:
            target = f"table {e['table']}" if e.get("table") else f"rules {e.get('rules')}"
            events.append(
                {
                    "after_episode": int(e["after_episode"]),
                    "kind": e.get("kind", ""),
                    "target": target,
                    "rules": bool(e.get("rules")),
                }
            )
    else:
        events = [
            {
                "after_episode": int(r["after_episode"]),
                "kind": r.get("kind", ""),
                "target": str(r.get("target", "")),
                "rules": str(r.get("target", "")).startswith("rules"),
            }
            for r in run.of("drift")
        ]
    return sorted(events, key=lambda e: e["after_episode"])


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
    return _mean([1.0 if is_first_try(e) else 0.0 for e in episodes])


def _by(
    episodes: Sequence[Mapping[str, Any]], field_name: str
) -> dict[str, list[Mapping[str, Any]]]:
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for e in episodes:
        if e.get(field_name) is not None:
            groups[str(e[field_name])].append(e)
    return groups


def _rules_version_before(attempts: Sequence[Mapping[str, Any]], episode: int) -> str | None:
    """The ``rules_version`` of the last response recorded up to the end of ``episode``."""
    seen = [
        a
        for a in attempts
        if int(a.get("episode", 0)) <= episode and a.get("rules_version") is not None
    ]
    if not seen:
        return None
    last = max(seen, key=lambda a: (int(a.get("episode", 0)), int(a.get("attempt", 0))))
    return str(last["rules_version"])


def _alert(
    event: Mapping[str, Any],
    inside: Sequence[Mapping[str, Any]],
    attempts: Sequence[Mapping[str, Any]],
    until: int | None,
    detection: str,
) -> int | None:
    """DEFINITIONS "Alert": the first ``alert`` record, else (lazy) the first failure-gated one."""
    if not event["rules"]:
        return None
    alerts = [int(m["episode"]) for m in inside if m.get("event") == "alert"]
    if alerts:
        return min(alerts)
    if detection != "lazy":
        return None
    start = event["after_episode"]
    before = _rules_version_before(attempts, start)
    if before is None:
        return None
    sightings = [
        int(a["episode"])
        for a in attempts
        if start < int(a.get("episode", 0)) <= (until if until is not None else 1 << 30)
        and a.get("status") == 422
        and a.get("rules_version") not in (None, before)
    ]
    return min(sightings, default=None)


KIND_RANK = {"breaking": 0, "benign": 1, "touch": 2}


def _change_sets(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Events applied after the same episode, as one: no episode runs between them, so what
    follows answers to all of them together. Its target names each part with its own label
    (``table a (benign) + table b (breaking)``), its kind is the strongest part's."""
    merged: list[dict[str, Any]] = []
    for event in events:
        if merged and merged[-1]["after_episode"] == event["after_episode"]:
            last = merged[-1]
            parts = last.setdefault("parts", [(last["target"], last["kind"])])
            parts.append((event["target"], event["kind"]))
            last["target"] = " + ".join(f"{target} ({kind})" for target, kind in parts)
            last["kind"] = min((k for _, k in parts), key=lambda k: KIND_RANK.get(k, 3))
            last["rules"] = bool(last["rules"] or event["rules"])
        else:
            merged.append(dict(event))
    return merged


def _windows(
    events: list[dict[str, Any]],
    memory: list[dict[str, Any]],
    attempts: list[dict[str, Any]],
    last_episode: int,
    detection: str,
) -> tuple[DriftWindow, ...]:
    windows = []
    events = _change_sets(events)
    for i, event in enumerate(events):
        start = event["after_episode"]
        until = events[i + 1]["after_episode"] if i + 1 < len(events) else None
        inside = [
            m
            for m in memory
            if int(m.get("episode", 0)) > start
            and (until is None or int(m.get("episode", 0)) <= until)
        ]
        evicts = [m for m in inside if m.get("event") == "evict"]
        windows.append(
            DriftWindow(
                after_episode=start,
                kind=event["kind"],
                target=event["target"],
                rules=event["rules"],
                until_episode=until,
                reached=last_episode > start,
                evictions=len(evicts),
                evictions_correct=sum(1 for m in evicts if m.get("stale") is True),
                evictions_wrong=sum(1 for m in evicts if m.get("stale") is False),
                restamps=sum(1 for m in inside if m.get("event") == "restamp"),
                alert=_alert(event, inside, attempts, until, detection),
            )
        )
    return tuple(windows)


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


def run_metrics(run: Run) -> RunMetrics:
    """Score one run from its metadata and records."""
    meta, key = run.meta, run.meta.key
    episodes = sorted(run.of("episode"), key=lambda e: int(e["episode"]))
    attempts = list(run.of("attempt"))
    memory = list(run.of("memory"))
    slots = _stale_slots(run, episodes)
    departure_slots, departure_reasons = _departures(run)
    events = drift_events(run)

    governed_class = meta.extra.get("compliance_class", "governed")
    governed = [e for e in episodes if e.get("klass") == governed_class]
    excluded = slots | set(departure_slots)
    eligible = [e for e in governed if int(e["episode"]) not in excluded]
    compliance_hits = sum(1 for e in eligible if is_first_try(e))
    eligible_rate = _ratio(compliance_hits, len(eligible))
    compliance = None if key.arm == "none" else eligible_rate

    by_class = _by(episodes, "klass")
    by_action = _by(episodes, "action")
    last_drift = events[-1]["after_episode"] if events else None
    funding = by_class.get("funding", [])
    post_funding = [e for e in funding if last_drift is not None and int(e["episode"]) > last_drift]
    pre_funding = [e for e in funding if last_drift is not None and int(e["episode"]) <= last_drift]
    slot_classes = Counter(str(e.get("klass")) for e in episodes if int(e["episode"]) in slots)
    targeted = min(slot_classes, key=lambda k: (-slot_classes[k], k)) if slot_classes else None

    evicts = [m for m in memory if m.get("event") == "evict"]
    correct = sum(1 for m in evicts if m.get("stale") is True)
    wrong = sum(1 for m in evicts if m.get("stale") is False)
    stale_injected = [m for m in memory if m.get("event") == "inject" and m.get("stale") is True]
    stale_entries, stale_evicted = _recall(run, memory)
    last_episode = int(episodes[-1]["episode"]) if episodes else 0

    return RunMetrics(
        scenario=key.scenario,
        planner=key.planner,
        arm=key.arm,
        arm_code=str(meta.extra.get("arm_code") or key.arm),
        seed=key.seed,
        detection=key.detection,
        apply_mode=key.apply_mode,
        level=meta.level,
        simulated=meta.planner_simulated,
        planner_served=meta.planner_served,
        package_version=meta.package_version,
        episodes=meta.episodes,
        stale_slots=tuple(sorted(slots)),
        departure_slots=departure_slots,
        departure_reasons=departure_reasons,
        episodes_recorded=len(episodes),
        completed_episodes=sum(1 for e in episodes if is_completed(e)),
        completed_unfaithful=sum(1 for e in episodes if e.get("completed") and not is_faithful(e)),
        planner_errors=sum(1 for a in attempts if a.get("planner_error")),
        compliance_class=governed_class,
        compliance=compliance,
        compliance_eligible=len(eligible),
        compliance_first_try=compliance_hits,
        eligible_first_try=eligible_rate,
        first_try=sum(1 for e in episodes if is_first_try(e)),
        first_try_by_class={
            k: _rate(v) for k, v in sorted(by_class.items(), key=lambda kv: class_rank(kv[0]))
        },
        episodes_by_class={
            k: len(v) for k, v in sorted(by_class.items(), key=lambda kv: class_rank(kv[0]))
        },
        class_actions=_class_actions(episodes),
        drift_reached_classes=(
            _drift_reached(episodes, memory, events[0]["after_episode"]) if events else ()
        ),
        first_try_by_action={
            k: _rate(v) for k, v in sorted(by_action.items(), key=lambda kv: action_rank(kv[0]))
        },
        post_drift_funding=_rate(post_funding),
        post_drift_funding_episodes=len(post_funding),
        pre_drift_funding=_rate(pre_funding),
        pre_drift_funding_episodes=len(pre_funding),
        targeted_class=targeted,
        targeted_first_try=_rate(by_class.get(targeted, [])) if targeted else None,
        attempts=sum(int(e.get("attempts") or 0) for e in episodes),
        retries=sum(max(int(e.get("attempts") or 0) - 1, 0) for e in episodes),
        evictions=len(evicts),
        evictions_correct=correct,
        evictions_wrong=wrong,
        evictions_unlabelled=len(evicts) - correct - wrong,
        evictions_cascaded_from_wrong=_cascaded_from_wrong(evicts),
        restamps=sum(1 for m in memory if m.get("event") == "restamp"),
        precision=_ratio(correct, correct + wrong),
        recall=_ratio(stale_evicted, stale_entries),
        stale_entries=stale_entries,
        stale_entries_evicted=stale_evicted,
        injections=sum(1 for m in memory if m.get("event") == "inject"),
        stale_injections=len(stale_injected),
        stale_injections_outside_slots=sum(
            1 for m in stale_injected if int(m.get("episode", 0)) not in slots
        ),
        alerts=sum(1 for m in memory if m.get("event") == "alert"),
        drift=_windows(events, memory, attempts, last_episode, key.detection),
        tokens_in=sum(int(a.get("tokens_in") or 0) for a in attempts),
        tokens_out=sum(int(a.get("tokens_out") or 0) for a in attempts),
        tokens_estimated=meta.planner_simulated or any(a.get("tokens_estimated") for a in attempts),
        wire=WireTotals.of(attempts),
        conditional=bool(meta.extra.get("conditional")),
        command=meta.extra.get("command"),
        contract_tokens=sum(int(a.get("contract_tokens") or 0) for a in attempts),
        transport=meta.extra.get("transport"),
    )


@dataclass(frozen=True, slots=True)
class Stat:
    """A value over seeds: mean and sample standard deviation of the seeds where it is defined."""

    mean: float | None
    std: float | None
    n: int

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Stat:
        defined = [float(v) for v in values if v is not None]
        return cls(
            mean=_mean(defined),
            std=statistics.stdev(defined) if len(defined) > 1 else None,
            n=len(defined),
        )


@dataclass(frozen=True, slots=True)
class DriftCell:
    """One drift window's counts over the seeds of a cell."""

    after_episode: int
    kind: str
    target: str
    rules: bool
    evictions: Stat
    evictions_correct: Stat
    evictions_wrong: Stat
    restamps: Stat
    alert: Stat


#: The per-run numbers a cell averages over seeds (RunMetrics attribute names).
CELL_FIELDS = (
    "compliance",
    "eligible_first_try",
    "first_try",
    "post_drift_funding",
    "pre_drift_funding",
    "targeted_first_try",
    "attempts",
    "retries",
    "evictions",
    "evictions_correct",
    "evictions_wrong",
    "evictions_unlabelled",
    "evictions_cascaded_from_wrong",
    "restamps",
    "precision",
    "recall",
    "injections",
    "stale_injections",
    "stale_injections_outside_slots",
    "alerts",
    "episodes",
    "episodes_recorded",
    "completed_episodes",
    "completed_unfaithful",
    "planner_errors",
    "tokens_in",
    "tokens_out",
    "tokens",
    "contract_tokens",
)


@dataclass(frozen=True, slots=True)
class CellMetrics:
    """One grid cell: a (scenario, planner, arm, detection, apply mode) over its seeds."""

    scenario: str
    planner: str
    arm: str
    arm_code: str
    detection: str
    apply_mode: str
    simulated: bool
    tokens_estimated: bool
    levels: tuple[int, ...]
    seeds: tuple[int, ...]
    stats: dict[str, Stat]
    """Every name of ``CELL_FIELDS`` plus ``token_saving`` and ``tokens_vs_lazy``."""
    first_try_by_class: dict[str, Stat]
    first_try_by_action: dict[str, Stat]
    class_actions: dict[str, str]
    drift_reached_classes: tuple[str, ...]
    compliance_class: str
    departure_slots: tuple[int, ...]
    departure_reasons: tuple[str, ...]
    targeted_class: str | None
    rules_stream: bool
    drift: tuple[DriftCell, ...]
    wire: WireTotals
    completed_range: tuple[int, int]
    """Fewest and most completed episodes over the seeds."""

    def __getitem__(self, name: str) -> Stat:
        return self.stats[name]

    @property
    def label(self) -> str:
        """The planner, marked when simulated, with its detection and apply mode if not default."""
        return series_label(self.planner, self.simulated, self.detection, self.apply_mode)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["wire"] = self.wire.to_json()
        return data


def series_label(
    planner: str, simulated: bool, detection: str = "eager", apply_mode: str = "planner"
) -> str:
    """How tables and figures name a planner: ``name †`` if simulated; ``[lazy, client]`` modes."""
    label = planner + (f" {SIMULATED_MARK}" if simulated else "")
    variant = [v for v, default in ((detection, "eager"), (apply_mode, "planner")) if v != default]
    return label + (f" [{', '.join(variant)}]" if variant else "")


def _paired(
    metrics: Sequence[RunMetrics], reference: Mapping[tuple[Any, ...], RunMetrics], match: Any
) -> dict[RunKey, float | None]:
    out: dict[RunKey, float | None] = {}
    for m in metrics:
        ref = reference.get(match(m))
        out[m.key] = None if ref is None or not ref.tokens else m.tokens / ref.tokens
    return out


def _token_ratios(
    metrics: Sequence[RunMetrics],
) -> tuple[dict[RunKey, float | None], dict[RunKey, float | None]]:
    """Per run: tokens / tokens of the same planner's A0, and tokens / tokens of the lazy arm."""
    # A0 keeps no memory, so its detection and apply mode change nothing: any A0 run of the same
    # scenario, planner and seed is the baseline (the one with the same modes preferred).
    a0: dict[tuple[Any, ...], RunMetrics] = {}
    for m in sorted(metrics, key=lambda m: (m.detection, m.apply_mode) != ("eager", "planner")):
        if m.arm == "none":
            a0.setdefault((m.scenario, m.planner, m.seed), m)
            a0[(m.scenario, m.planner, m.seed, m.detection, m.apply_mode)] = m
    lazy: dict[tuple[Any, ...], RunMetrics] = {}
    for m in sorted(metrics, key=lambda m: m.detection != LAZY_REFERENCE[1]):
        if m.arm == LAZY_REFERENCE[0]:
            lazy.setdefault((m.scenario, m.planner, m.seed, m.apply_mode), m)
    vs_a0 = _paired(
        metrics,
        a0,
        lambda m: (
            (m.scenario, m.planner, m.seed, m.detection, m.apply_mode)
            if (m.scenario, m.planner, m.seed, m.detection, m.apply_mode) in a0
            else (m.scenario, m.planner, m.seed)
        ),
    )
    vs_lazy = _paired(metrics, lazy, lambda m: (m.scenario, m.planner, m.seed, m.apply_mode))
    return vs_a0, vs_lazy


def _drift_cells(group: Sequence[RunMetrics]) -> tuple[DriftCell, ...]:
    by_event: dict[int, list[DriftWindow]] = defaultdict(list)
    for m in group:
        for w in m.drift:
            by_event[w.after_episode].append(w)
    cells = []
    for after, windows in sorted(by_event.items()):
        first = windows[0]
        cells.append(
            DriftCell(
                after_episode=after,
                kind=first.kind,
                target=first.target,
                rules=first.rules,
                **{
                    name: Stat.of(getattr(w, name) for w in windows)
                    for name in (
                        "evictions",
                        "evictions_correct",
                        "evictions_wrong",
                        "restamps",
                        "alert",
                    )
                },
            )
        )
    return tuple(cells)


def _nested(group: Sequence[RunMetrics], attribute: str, rank: Any) -> dict[str, Stat]:
    names = sorted({k for m in group for k in getattr(m, attribute)}, key=rank)
    return {k: Stat.of(getattr(m, attribute).get(k) for m in group) for k in names}


def score(runs: Iterable[Run | RunMetrics]) -> list[RunMetrics]:
    """Run metrics for each run (already-scored runs pass through), in a stable order."""
    scored = [r if isinstance(r, RunMetrics) else run_metrics(r) for r in runs]
    return sorted(
        scored,
        key=lambda m: (m.scenario, m.planner, arm_rank(m.arm), m.detection, m.apply_mode, m.seed),
    )


def aggregate(runs: Iterable[Run | RunMetrics]) -> list[CellMetrics]:
    """Pool runs into cells: mean, sample std and count over seeds for every metric."""
    metrics = score(runs)
    vs_a0, vs_lazy = _token_ratios(metrics)
    groups: dict[tuple[str, ...], list[RunMetrics]] = defaultdict(list)
    for m in metrics:
        groups[(m.scenario, m.planner, m.arm, m.detection, m.apply_mode)].append(m)
    cells = []
    for (scenario, planner, arm, detection, apply_mode), group in groups.items():
        stats = {name: Stat.of(getattr(m, name) for m in group) for name in CELL_FIELDS}
        stats["token_saving"] = Stat.of(
            None if (r := vs_a0[m.key]) is None else 1.0 - r for m in group
        )
        stats["tokens_vs_lazy"] = Stat.of(
            None if (r := vs_lazy[m.key]) is None else r - 1.0 for m in group
        )
        wire = WireTotals()
        for m in group:
            wire = wire + m.wire
        completed = [m.completed_episodes for m in group]
        cells.append(
            CellMetrics(
                scenario=scenario,
                planner=planner,
                arm=arm,
                arm_code=group[0].arm_code,
                detection=detection,
                apply_mode=apply_mode,
                simulated=any(m.simulated for m in group),
                tokens_estimated=any(m.tokens_estimated for m in group),
                levels=tuple(sorted({m.level for m in group})),
                seeds=tuple(m.seed for m in group),
                stats=stats,
                first_try_by_class=_nested(group, "first_try_by_class", class_rank),
                first_try_by_action=_nested(group, "first_try_by_action", action_rank),
                class_actions={k: v for m in group for k, v in m.class_actions.items()},
                drift_reached_classes=tuple(
                    sorted({k for m in group for k in m.drift_reached_classes}, key=class_rank)
                ),
                compliance_class=group[0].compliance_class,
                departure_slots=group[0].departure_slots,
                departure_reasons=group[0].departure_reasons,
                targeted_class=group[0].targeted_class,
                rules_stream=group[0].rules_stream,
                drift=_drift_cells(group),
                wire=wire,
                completed_range=(min(completed), max(completed)),
            )
        )
    return cells


_ROTATIONS = re.compile(r"^(?P<stream>.+)-rotations-(?P<n>\d+)$")


def rotation_count(scenario: str) -> tuple[str, int] | None:
    """``payments-rotations-2`` → ``("payments", 2)``: the drift-rate streams of Figure 5."""
    match = _ROTATIONS.match(scenario)
    return (match["stream"], int(match["n"])) if match else None


def is_variant(scenario: str, scenarios: Iterable[str]) -> bool:
    """``payments-drifted-l1`` is a variant of ``payments-drifted`` when both are in ``scenarios``:
    the cross-stream views (Table 7, Figure 6) draw each stream once, from its base manifest."""
    return any(scenario.startswith(other + "-") for other in scenarios if other != scenario)


def summary_json(root: Path) -> dict[str, Any]:
    """Every run's metrics and every cell's aggregate under ``root``, as JSON-ready data."""
    metrics = score(read_runs(root))
    return {
        "definitions": dict(DEFINITIONS),
        "runs": [m.to_json() for m in metrics],
        "cells": [c.to_json() for c in aggregate(metrics)],
    }
