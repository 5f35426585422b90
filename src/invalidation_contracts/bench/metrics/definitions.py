"""The pre-registered definition of every metric, in prose: the report's "Definitions" section.

Kept apart from the code that computes them so a reader (or a reviewer of a pre-registration) finds
every definition in one place; each name here is a column or row of the report.
"""

from __future__ import annotations

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
            "`after_episode` up to and including the next drift event's `after_episode`. Events "
            "after the same episode share those episodes and are counted each on its own: an "
            "eviction under each event that changed a table the evicted entry depended on (its "
            "`store` record's `tables`; a rules event: evictions for a rules change), a restamp "
            "under each event whose table (or the rules) its record's `tables` names."
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
