"""The grid's arms: a strategy plus the detection and apply modes it runs with."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Arm:
    """One client configuration under test."""

    strategy: str
    detection: str = "eager"
    apply_mode: str = "planner"

    @classmethod
    def parse(cls, text: str) -> Arm:
        """``row``, ``A2D``, ``row/lazy`` or ``row/eager/client``."""
        strategy, *rest = text.split("/")
        if len(rest) > 2:
            raise ValueError(f"arm {text!r}: expected STRATEGY[/DETECTION[/APPLY_MODE]]")
        return cls(strategy, *rest)

    def __str__(self) -> str:
        if (self.detection, self.apply_mode) == ("eager", "planner"):
            return self.strategy
        return f"{self.strategy}/{self.detection}/{self.apply_mode}"


#: The A-ladder of the paper's Table 3 (payments and recipes streams).
LADDER = tuple(Arm(s) for s in ("none", "naive", "table", "row", "row+consumers", "row+graph"))
#: The detection-policy price sheet of the paper's Table 5 (rules stream).
RULES_ARMS = (
    Arm("row+consumers", "lazy"),
    Arm("rules-stamp"),
    Arm("rules-stamp+vectors"),
    Arm("rules-oracle"),
)
