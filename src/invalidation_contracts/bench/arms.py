"""The grid's arms: a strategy plus the detection and apply modes it runs with."""

from __future__ import annotations

from dataclasses import dataclass

from ..client.detection import Detection
from ..client.patching import ApplyMode
from ..client.strategies import strategy_for


@dataclass(frozen=True, slots=True)
class Arm:
    """One client configuration under test, normalised: ``A2D`` and ``row`` are the same arm."""

    strategy: str
    detection: str = "eager"
    apply_mode: str = "planner"

    def __post_init__(self) -> None:
        try:
            mode = ApplyMode(str(self.apply_mode).strip().lower())
        except ValueError:
            raise ValueError(
                f"unknown apply mode {self.apply_mode!r}; expected planner or client"
            ) from None
        object.__setattr__(self, "strategy", strategy_for(self.strategy).name)
        object.__setattr__(self, "detection", Detection.parse(self.detection).value)
        object.__setattr__(self, "apply_mode", mode.value)

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
