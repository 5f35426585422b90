"""Detection policies: when the memory reads the contract (paper §6.3)."""

from __future__ import annotations

from enum import Enum
from typing import Literal

#: The detection policies by name.
DetectionName = Literal["lazy", "eager", "resync"]


class Detection(str, Enum):  # noqa: UP042 - keeps str() and f-string output as is
    """When stamps are compared with the memory."""

    LAZY = "lazy"
    """Failure-gated: stamps are read only on policy failures (HTTP 422)."""
    EAGER = "eager"
    """Stamps are read on every response, success or failure. The default."""
    RESYNC = "resync"
    """Eager, and before an episode uses memory the changes feed since the last position is read."""

    @classmethod
    def parse(cls, value: str | Detection) -> Detection:
        if isinstance(value, Detection):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise ValueError(
                f"unknown detection {value!r}; expected lazy, eager or resync"
            ) from None

    def reads_stamps(self, status: int) -> bool:
        """Whether a response with this HTTP status has its stamps read."""
        return self is not Detection.LAZY or status == 422

    @property
    def resyncs_before_episode(self) -> bool:
        return self is Detection.RESYNC
