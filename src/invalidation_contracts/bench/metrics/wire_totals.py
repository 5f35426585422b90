"""Wire cost: byte sums over a run's responses, pooled by adding (cells and levels alike)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ._numbers import ratio


@dataclass(frozen=True, slots=True)
class WireTotals:
    """Byte sums over responses; adding two pools them, so cells and levels are measured alike."""

    responses: int = 0
    response_bytes: int = 0
    contract_bytes: int = 0
    envelope_bytes: int = 0
    suggestion_bytes: int = 0
    max_contract_bytes: int = 0
    with_suggestions: int = 0
    with_suggestions_response_bytes: int = 0
    with_suggestions_contract_bytes: int = 0
    paper_measured: int = 0
    """Responses whose record carries the paper's L1 field bytes (``paper_contract_bytes``)."""
    paper_response_bytes: int = 0
    paper_contract_bytes: int = 0
    paper_envelope_bytes: int = 0
    max_paper_contract_bytes: int = 0

    @classmethod
    def of(cls, attempts: Iterable[Mapping[str, Any]]) -> WireTotals:
        total = cls()
        for a in attempts:
            if a.get("response_bytes") is None:
                continue  # no response (the planner's reply was unusable)
            response = int(a.get("response_bytes") or 0)
            contract = int(a.get("contract_bytes") or 0)
            carries = bool(a.get("suggestion_types"))
            paper = a.get("paper_contract_bytes")
            total = total + cls(
                responses=1,
                response_bytes=response,
                contract_bytes=contract,
                envelope_bytes=int(a.get("envelope_bytes") or 0),
                suggestion_bytes=int(a.get("suggestion_bytes") or 0),
                max_contract_bytes=contract,
                with_suggestions=int(carries),
                with_suggestions_response_bytes=response if carries else 0,
                with_suggestions_contract_bytes=contract if carries else 0,
                paper_measured=int(paper is not None),
                paper_response_bytes=response if paper is not None else 0,
                paper_contract_bytes=int(paper or 0),
                paper_envelope_bytes=int(a.get("paper_envelope_bytes") or 0),
                max_paper_contract_bytes=int(paper or 0),
            )
        return total

    def __add__(self, other: WireTotals) -> WireTotals:
        return WireTotals(
            **{
                name: max(getattr(self, name), getattr(other, name))
                if name.startswith("max_")
                else getattr(self, name) + getattr(other, name)
                for name in self.__dataclass_fields__
            }
        )

    @property
    def mean_response_bytes(self) -> float | None:
        return ratio(self.response_bytes, self.responses)

    @property
    def mean_contract_bytes(self) -> float | None:
        return ratio(self.contract_bytes, self.responses)

    @property
    def mean_envelope_bytes(self) -> float | None:
        return ratio(self.envelope_bytes, self.responses)

    @property
    def mean_suggestion_bytes(self) -> float | None:
        return ratio(self.suggestion_bytes, self.responses)

    @property
    def overhead(self) -> float | None:
        """Σ contract bytes / Σ response bytes."""
        return ratio(self.contract_bytes, self.response_bytes)

    @property
    def envelope_share(self) -> float | None:
        return ratio(self.envelope_bytes, self.response_bytes)

    @property
    def suggestion_share(self) -> float | None:
        return ratio(self.suggestion_bytes, self.response_bytes)

    @property
    def mean_contract_bytes_with_suggestions(self) -> float | None:
        return ratio(self.with_suggestions_contract_bytes, self.with_suggestions)

    @property
    def overhead_with_suggestions(self) -> float | None:
        return ratio(self.with_suggestions_contract_bytes, self.with_suggestions_response_bytes)

    @property
    def paper_overhead(self) -> float | None:
        """The paper's L1 fields over the responses that recorded them: Σ field bytes / Σ bytes."""
        return ratio(self.paper_contract_bytes, self.paper_response_bytes)

    @property
    def mean_paper_contract_bytes(self) -> float | None:
        return ratio(self.paper_contract_bytes, self.paper_measured)

    @property
    def paper_envelope_share(self) -> float | None:
        """``table_versions`` alone, as a share of the response bytes."""
        return ratio(self.paper_envelope_bytes, self.paper_response_bytes)

    @property
    def mean_paper_envelope_bytes(self) -> float | None:
        return ratio(self.paper_envelope_bytes, self.paper_measured)

    @property
    def paper_suggestion_share(self) -> float | None:
        """``cache_hint`` and ``table`` together, as a share of the response bytes."""
        return ratio(
            self.paper_contract_bytes - self.paper_envelope_bytes, self.paper_response_bytes
        )

    @property
    def mean_paper_suggestion_bytes(self) -> float | None:
        return ratio(self.paper_contract_bytes - self.paper_envelope_bytes, self.paper_measured)

    def to_json(self) -> dict[str, Any]:
        derived = (
            "mean_response_bytes",
            "mean_contract_bytes",
            "mean_envelope_bytes",
            "mean_suggestion_bytes",
            "overhead",
            "envelope_share",
            "suggestion_share",
            "mean_contract_bytes_with_suggestions",
            "overhead_with_suggestions",
            "paper_overhead",
            "mean_paper_contract_bytes",
            "paper_envelope_share",
            "mean_paper_envelope_bytes",
            "paper_suggestion_share",
            "mean_paper_suggestion_bytes",
        )
        return {**asdict(self), **{name: getattr(self, name) for name in derived}}
