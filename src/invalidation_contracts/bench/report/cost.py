"""What the contract costs: bytes on the wire (the paper's §3.7) and tokens kept from the model."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ..metrics import (
    CellMetrics,
    RunMetrics,
    WireTotals,
    arm_rank,
)
from .markup import (
    DASH,
    _bytes,
    _count,
    _pct,
    _simulated_line,
    markdown_table,
)

#: The paper's own §3.7 figures (3,387 archived responses), quoted beside the measured rows.
PAPER_WIRE = (
    "Paper §3.7 (quoted: its 3,387 archived responses, L1 fields)",
    "–",
    "3,387",
    "–",
    "817",
    "123",
    "15.1",
    "11.7",
    "190",
    "3.2",
    "–",
    "–",
    "–",
    "251",
)


def _wire_row(label: str, runs: int, w: WireTotals) -> list[str]:
    return [
        label,
        str(runs),
        f"{w.responses:,}",
        f"{w.with_suggestions:,}",
        _bytes(w.mean_response_bytes),
        _bytes(w.mean_contract_bytes),
        _pct(w.overhead),
        _pct(w.envelope_share),
        _bytes(w.mean_envelope_bytes),
        _pct(w.suggestion_share),
        _bytes(w.mean_suggestion_bytes),
        _bytes(w.mean_contract_bytes_with_suggestions),
        _pct(w.overhead_with_suggestions),
        f"{w.max_contract_bytes:,}",
    ]


def _paper_row(label: str, runs: int, w: WireTotals) -> list[str]:
    return [
        label,
        str(runs),
        f"{w.paper_measured:,}",
        f"{w.with_suggestions:,}",
        _bytes(_ratio(w.paper_response_bytes, w.paper_measured)),
        _bytes(w.mean_paper_contract_bytes),
        _pct(w.paper_overhead),
        _pct(w.paper_envelope_share),
        _bytes(w.mean_paper_envelope_bytes),
        _pct(w.paper_suggestion_share),
        _bytes(w.mean_paper_suggestion_bytes),
        DASH,
        DASH,
        f"{w.max_paper_contract_bytes:,}",
    ]


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def model_view_table(cells: Sequence[CellMetrics]) -> str:
    """What the model is not shown: the contract's input tokens kept out of the prompts."""
    headers = ["Scenario", "Planner", "Arm", "Input tokens", "Contract tokens hidden", "Share (%)"]
    ordered = sorted(
        cells, key=lambda c: (c.scenario, c.planner, c.detection, c.apply_mode, arm_rank(c.arm))
    )
    rows = []
    for c in ordered:
        shown, hidden = c["tokens_in"].mean, c["contract_tokens"].mean
        share = (
            DASH
            if shown is None or hidden is None or not shown + hidden
            else f"{100 * hidden / (shown + hidden):.1f}"
        )
        estimated = " est." if c.tokens_estimated else ""
        rows.append(
            [
                c.scenario,
                c.label,
                c.arm_code,
                f"{_count(shown)}{estimated}",
                f"{_count(hidden)} est.",
                share,
            ]
        )
    caption = (
        "Planners are shown each earlier response without its contract metadata (the envelope "
        "stamps, dependency vectors, scopes, patches, cache hints); the memory reads it whole. "
        "Contract tokens hidden = estimated input tokens those members would have added to the "
        "prompts (four characters a token); share = hidden / (input tokens + hidden). Mean over "
        "seeds."
    )
    return "\n\n".join(
        [
            "### What the model is shown",
            caption,
            markdown_table(headers, rows),
            _simulated_line(cells),
        ]
    )


def wire_table(metrics: Sequence[RunMetrics], cells: Sequence[CellMetrics]) -> str | None:
    """§3.7: what the contract costs on the wire, pooled over every response.

    Three measurements, each labelled: the paper's row (only its L1 fields ``table_versions``,
    ``cache_hint`` and ``table``, on the lowest-level responses there are); the project's full
    contract per server level (every contract member, extensions and dependency vectors included);
    and the conditional contract (``Contract-Since``) where runs sent it. The paper's own figures
    are quoted last.
    """
    if not any(m.wire.responses for m in metrics):
        return None
    groups: dict[tuple[int, bool], list[RunMetrics]] = defaultdict(list)
    for m in metrics:
        groups[(m.level, m.conditional)].append(m)
    totals = {}
    for key, group in groups.items():
        w = WireTotals()
        for m in group:
            w = w + m.wire
        totals[key] = w
    headers = [
        "What is counted",
        "Runs",
        "Responses",
        "With sugg.",
        "Mean resp. (B)",
        "Mean contract (B)",
        "Overhead (%)",
        "Envelope (%)",
        "Envelope mean (B)",
        "Sugg. fields (%)",
        "Sugg. fields mean (B)",
        "Contract w/ sugg. (B)",
        "Overhead w/ sugg. (%)",
        "Max contract (B)",
    ]
    rows = []
    plain = sorted(k for k in totals if not k[1] and totals[k].paper_measured)
    if plain:
        level = plain[0][0]
        where = "" if level == 1 else f", measured on L{level} responses (no L1 run)"
        rows.append(
            _paper_row(
                f"L{level} · the paper's L1 fields only (table_versions, cache_hint, table){where}",
                len(groups[plain[0]]),
                totals[plain[0]],
            )
        )
    for level, conditional in sorted(totals):
        what = "conditional contract (Contract-Since, ext)" if conditional else "full contract"
        rows.append(
            _wire_row(
                f"L{level} · {what}: every contract member",
                len(groups[(level, conditional)]),
                totals[(level, conditional)],
            )
        )
    rows.append(list(PAPER_WIRE))
    caption = (
        "Pooled over every response of every run at that server level (all scenarios, planners, "
        "arms). Overhead = Σ contract bytes / Σ response bytes; the envelope is the response-level "
        "stamps, the suggestion fields the per-suggestion cache metadata; “w/ sugg.” restricts to "
        "responses that carry suggestions. Rows measure different things: the paper's row counts "
        "only its L1 fields (what its 15.1 % counts); a full-contract row counts every contract "
        "member the level emits (the extensions `contract_seq`, `contract_epoch`, `scope`, and "
        "from L4 the dependency vectors with row keys and rules, from L6 `rules_version`); a "
        "conditional "
        "row is the same client sending `Contract-Since`, so unchanged stamps are left out. The "
        "last row quotes the paper (which also gives 2,419 responses carrying contract fields, "
        "173 B mean among them, `cache_hint` 24 B and `table` 28 B); its responses are not this "
        "project's."
    )
    return "\n\n".join(
        [
            "### §3.7 — What the contract costs on the wire",
            caption,
            markdown_table(headers, rows),
            _simulated_line(cells),
        ]
    )
