"""How tables and figures order and name things: arms in ladder order, classes and hint shapes in
the paper's order, planner series with their modes, and the streams a view draws once."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ...client.strategies import STRATEGY_CLASSES

#: The strategies in ladder order (descriptive names), as the strategy classes list them; unknown
#: arms sort after them by name.
ARM_ORDER: tuple[str, ...] = tuple(cls.name for cls in STRATEGY_CLASSES)
#: The suffix of an arm run with the contract withheld (the server at level ``none``).
WITHHELD = "@none"
#: Table 5's baseline: lazy (failure-gated) detection with consumer notification.
LAZY_REFERENCE = ("row+consumers", "lazy")
#: Class order in tables; other classes follow by name.
CLASS_ORDER = ("governed", "funding", "negative_control", "no_constraint")
#: Marks a simulated planner wherever a planner is named in a table or figure.
SIMULATED_MARK = "†"
#: Hint shapes (episode ``action``) in Table 7's order.
ACTION_ORDER = ("add_field", "rewrite_value", "conditional_rewrite")


def arm_rank(arm: str) -> tuple[int, str]:
    """Sort key putting arms in ladder order (an arm with its contract withheld, ``learned@none``,
    right after the same arm with it)."""
    base, sep, _ = arm.partition(WITHHELD)
    return (ARM_ORDER.index(base), sep) if base in ARM_ORDER else (len(ARM_ORDER), arm)


def class_rank(klass: str) -> tuple[int, str]:
    """Sort key putting constraint classes in table order."""
    return (CLASS_ORDER.index(klass), "") if klass in CLASS_ORDER else (len(CLASS_ORDER), klass)


def action_rank(action: str) -> tuple[int, str]:
    return (
        (ACTION_ORDER.index(action), "") if action in ACTION_ORDER else (len(ACTION_ORDER), action)
    )


def series_label(
    planner: str, simulated: bool, detection: str = "eager", apply_mode: str = "planner"
) -> str:
    """How tables and figures name a planner: ``name †`` if simulated; ``[lazy, client]`` modes."""
    label = planner + (f" {SIMULATED_MARK}" if simulated else "")
    variant = [v for v, default in ((detection, "eager"), (apply_mode, "planner")) if v != default]
    return label + (f" [{', '.join(variant)}]" if variant else "")


_ROTATIONS = re.compile(r"^(?P<stream>.+)-rotations-(?P<n>\d+)$")


def rotation_count(scenario: str) -> tuple[str, int] | None:
    """``payments-rotations-2`` → ``("payments", 2)``: the drift-rate streams of Figure 5."""
    match = _ROTATIONS.match(scenario)
    return (match["stream"], int(match["n"])) if match else None


def is_variant(scenario: str, scenarios: Iterable[str]) -> bool:
    """``payments-drifted-l1`` is a variant of ``payments-drifted`` when both are in ``scenarios``:
    the cross-stream views (Table 7, Figure 6) draw each stream once, from its base manifest."""
    return any(scenario.startswith(other + "-") for other in scenarios if other != scenario)
