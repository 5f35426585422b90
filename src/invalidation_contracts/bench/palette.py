"""The figures' colours and markers, one per series (the frontier's scatter and the report's
plots share them)."""

from __future__ import annotations

#: matplotlib's tab10, so colors do not depend on the user's rc settings.
COLORS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
#: One marker per planner series, so series with equal values stay distinguishable.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
