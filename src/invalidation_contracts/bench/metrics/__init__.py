"""The paper's metrics, computed from run artifacts alone, so a report is rebuilt without rerunning.

``run_metrics`` scores one run, ``aggregate`` pools runs into grid cells (one per scenario, planner,
arm, detection and apply mode) as a mean over seeds, and ``summary_json`` is both for machines.
Every definition is pre-registered; they are listed in ``DEFINITIONS`` (rendered into the report's
"Definitions" section and appended to this docstring at import).

One module per job: ``definitions`` (the prose), ``order`` (how tables order and name things),
``wire_totals`` (wire cost), ``run`` (per-run scoring) and ``pooling`` (cells over seeds).
"""

from __future__ import annotations

from .definitions import DEFINITIONS
from .drift import KIND_RANK, DriftPart, DriftWindow, drift_events
from .order import (
    ACTION_ORDER,
    ARM_ORDER,
    CLASS_ORDER,
    LAZY_REFERENCE,
    SIMULATED_MARK,
    action_rank,
    arm_rank,
    class_rank,
    is_variant,
    rotation_count,
    series_label,
)
from .pooling import CELL_FIELDS, CellMetrics, DriftCell, Stat, aggregate, summary_json
from .run import (
    RunMetrics,
    is_completed,
    is_faithful,
    is_first_try,
    run_metrics,
    score,
)
from .wire_totals import WireTotals

__all__ = [
    "ACTION_ORDER",
    "ARM_ORDER",
    "CELL_FIELDS",
    "CLASS_ORDER",
    "CellMetrics",
    "DEFINITIONS",
    "DriftCell",
    "DriftPart",
    "DriftWindow",
    "KIND_RANK",
    "LAZY_REFERENCE",
    "RunMetrics",
    "SIMULATED_MARK",
    "Stat",
    "WireTotals",
    "action_rank",
    "aggregate",
    "arm_rank",
    "class_rank",
    "drift_events",
    "is_completed",
    "is_faithful",
    "is_first_try",
    "is_variant",
    "rotation_count",
    "run_metrics",
    "score",
    "series_label",
    "summary_json",
]

__doc__ = (
    (__doc__ or "")
    + "\nDefinitions:\n\n"
    + "\n".join(f"* {name}: {text}" for name, text in DEFINITIONS)
)
