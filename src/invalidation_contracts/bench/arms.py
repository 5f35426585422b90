"""The grid's arms: a strategy plus the detection and apply modes it runs with."""

from __future__ import annotations

from dataclasses import dataclass

from ..client.detection import Detection
from ..client.patching import ApplyMode
from ..client.strategies import strategy_for
from .metrics.order import WITHHELD


@dataclass(frozen=True, slots=True)
class Arm:
    """One client configuration under test, normalised: ``A2D`` and ``row`` are the same arm."""

    strategy: str
    detection: str = "eager"
    apply_mode: str = "planner"
    withheld: bool = False
    """The contract withheld: the server runs at level ``none`` (suggestions, no contract field),
    whatever the scenario's level. Written ``learned@none``."""

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
        """``row``, ``A2D``, ``row/lazy``, ``row/eager/client``; a ``@none`` suffix withholds the
        contract (``learned@none``, ``naive/eager/planner@none``)."""
        text, sep, level = text.partition("@")
        if sep and level.strip().lower() != "none":
            raise ValueError(f"arm {text}@{level}: the only level an arm names is @none")
        strategy, *rest = text.split("/")
        if len(rest) > 2:
            raise ValueError(f"arm {text!r}: expected STRATEGY[/DETECTION[/APPLY_MODE]]")
        detection = rest[0] if rest else "eager"
        apply_mode = rest[1] if len(rest) > 1 else "planner"
        return cls(strategy, detection, apply_mode, withheld=bool(sep))

    def without_contract(self) -> Arm:
        """This arm with the contract withheld."""
        return Arm(self.strategy, self.detection, self.apply_mode, withheld=True)

    @property
    def label(self) -> str:
        """The strategy as reports name the arm: ``learned``, or ``learned@none`` if withheld."""
        return self.strategy + (WITHHELD if self.withheld else "")

    def __str__(self) -> str:
        suffix = WITHHELD if self.withheld else ""
        if (self.detection, self.apply_mode) == ("eager", "planner"):
            return self.strategy + suffix
        return f"{self.strategy}/{self.detection}/{self.apply_mode}{suffix}"


#: The A-ladder of the paper's Table 3 (payments and recipes streams).
LADDER = tuple(Arm(s) for s in ("none", "naive", "table", "row", "row+consumers", "row+graph"))
#: The contract-less comparison: the contract-less policies with the contract withheld, next to
#: A0, naive memory and A2D with the contract (docs/without-contract.md).
CONTRACTLESS = (
    Arm("none"),
    Arm("naive"),
    Arm("row"),
    Arm("naive", withheld=True),
    Arm("ttl", withheld=True),
    Arm("verify", withheld=True),
    Arm("learned", withheld=True),
)
#: The detection-policy price sheet of the paper's Table 5 (rules stream).
RULES_ARMS = (
    Arm("row+consumers", "lazy"),
    Arm("rules-stamp"),
    Arm("rules-stamp+vectors"),
    Arm("rules-oracle"),
)
