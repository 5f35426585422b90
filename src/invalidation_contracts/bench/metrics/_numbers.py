"""The two guarded averages every metric is built from: None where nothing is there to average."""

from __future__ import annotations

from collections.abc import Sequence


def ratio(numerator: float, denominator: float) -> float | None:
    """``numerator / denominator``, or None for an empty denominator (undefined, not zero)."""
    return numerator / denominator if denominator else None


def mean(values: Sequence[float]) -> float | None:
    """The arithmetic mean, or None for no values."""
    return sum(values) / len(values) if values else None
