"""Pooling: runs into grid cells (scenario, planner, arm, detection, apply mode) as a mean, sample
standard deviation and count over seeds, and ``summary_json``, every run and cell for machines."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..artifacts import Run, RunKey, read_runs
from ._numbers import mean
from .definitions import DEFINITIONS
from .drift import DriftWindow
from .order import LAZY_REFERENCE, action_rank, class_rank, series_label
from .run import RunMetrics, score
from .wire_totals import WireTotals


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
            mean=mean(defined),
            std=statistics.stdev(defined) if len(defined) > 1 else None,
            n=len(defined),
        )


@dataclass(frozen=True, slots=True)
class DriftPartCell:
    """One event of a shared drift window (``DriftPart``), its counts over the seeds of a cell."""

    target: str
    kind: str
    rules: bool
    evictions: Stat
    evictions_correct: Stat
    evictions_wrong: Stat
    restamps: Stat


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
    parts: tuple[DriftPartCell, ...] = ()
    """Each event of a window several share, with its own counts (empty for a single event)."""


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
    "probes",
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


def _paired(
    metrics: Sequence[RunMetrics],
    reference: Mapping[tuple[Any, ...], RunMetrics],
    match: Callable[[RunMetrics], tuple[Any, ...]],
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
                parts=_part_cells(windows),
            )
        )
    return tuple(cells)


def _nested(
    group: Sequence[RunMetrics], attribute: str, rank: Callable[[str], tuple[int, str]]
) -> dict[str, Stat]:
    names = sorted({k for m in group for k in getattr(m, attribute)}, key=rank)
    return {k: Stat.of(getattr(m, attribute).get(k) for m in group) for k in names}


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


def summary_json(root: Path) -> dict[str, Any]:
    """Every run's metrics and every cell's aggregate under ``root``, as JSON-ready data."""
    metrics = score(read_runs(root))
    return {
        "definitions": dict(DEFINITIONS),
        "runs": [m.to_json() for m in metrics],
        "cells": [c.to_json() for c in aggregate(metrics)],
    }


def _part_cells(windows: Sequence[DriftWindow]) -> tuple[DriftPartCell, ...]:
    """The parts of one shared window over the seeds, matched by position."""
    count = min((len(w.parts) for w in windows), default=0)
    return tuple(
        DriftPartCell(
            target=windows[0].parts[i].target,
            kind=windows[0].parts[i].kind,
            rules=windows[0].parts[i].rules,
            **{
                name: Stat.of(getattr(w.parts[i], name) for w in windows)
                for name in ("evictions", "evictions_correct", "evictions_wrong", "restamps")
            },
        )
        for i in range(count)
    )
