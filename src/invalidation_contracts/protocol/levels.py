"""Protocol levels L0–L6 (paper Table 1) and what each one puts on the wire, plus ``none``.

``none`` sits below L0: the server sends its recovery suggestions (type, parameters, action,
scope, patch) but no contract field at all (no ``cache_hint``, ``table``, ``tables``,
``table_versions``, ``contract_seq``, ``contract_epoch``, ``rules_version``), as an API that speaks
no contract does. The harness runs a stream with the contract withheld at this level.
"""

from __future__ import annotations

from enum import IntEnum


class Level(IntEnum):
    """A server's contract level.

    Wire levels add fields; L2 and L3 change only the client's prompt.
    """

    NONE = -1
    RAW = 0
    STRUCTURED = 1
    PATCH_PROTOCOL = 2
    AMENDED_INPUT = 3
    DEPENDENCY_VECTORS = 4
    SUBGRAPH = 5
    RULES_FINGERPRINT = 6

    @classmethod
    def parse(cls, value: int | str | Level) -> Level:
        """Accept ``6``, ``"6"``, ``"L6"``, ``"none"`` (or ``-1``) or a member name; raise
        ``ValueError`` otherwise."""
        if isinstance(value, Level):
            return value
        text = str(value).strip().upper()
        if text in ("NONE", "-1"):
            return cls.NONE
        if text.startswith("L") and text[1:].isdigit():
            text = text[1:]
        if text.isdigit():
            number = int(text)
            if 0 <= number <= 6:
                return cls(number)
        elif text in cls.__members__:
            return cls[text]
        raise ValueError(f"unknown protocol level {value!r}; expected 0-6, L0-L6 or none")

    @property
    def is_wire(self) -> bool:
        """True for the levels that change what the server emits."""
        return self not in (Level.PATCH_PROTOCOL, Level.AMENDED_INPUT)

    @property
    def structured(self) -> bool:
        """L1+: typed suggestions with cache_hint and table, and table_versions on every
        response."""
        return self >= Level.STRUCTURED

    @property
    def suggests(self) -> bool:
        """Whether 422s carry typed suggestions: L1+, and ``none`` (suggestions, no contract)."""
        return self is Level.NONE or self.structured

    @property
    def dependency_vectors(self) -> bool:
        """L4+: each suggestion carries ``tables`` (with row keys) and the rules it relied on."""
        return self >= Level.DEPENDENCY_VECTORS

    @property
    def graph(self) -> bool:
        """L5+: the versioned knowledge graph is served at ``GET /contract/graph``."""
        return self >= Level.SUBGRAPH

    @property
    def rules_fingerprint(self) -> bool:
        """L6: ``rules_version`` travels on every response, success included."""
        return self >= Level.RULES_FINGERPRINT


#: The fields each level adds, for documentation and conformance tests (paper Table 1).
LEVEL_ADDS: dict[Level, tuple[str, ...]] = {
    Level.NONE: (
        "recovery_feedback.suggestions[].type",
        "recovery_feedback.suggestions[].parameters",
        "recovery_feedback.suggestions[].action",
        "recovery_feedback.suggestions[].scope",
        "recovery_feedback.suggestions[].patch",
    ),
    Level.RAW: ("detail",),
    Level.STRUCTURED: (
        "recovery_feedback.suggestions[].type",
        "recovery_feedback.suggestions[].parameters",
        "recovery_feedback.suggestions[].action",
        "recovery_feedback.suggestions[].cache_hint",
        "recovery_feedback.suggestions[].table",
        "recovery_feedback.suggestions[].scope",
        "recovery_feedback.suggestions[].patch",
        "table_versions",
        "contract_seq",
        "contract_epoch",
    ),
    Level.PATCH_PROTOCOL: (),
    Level.AMENDED_INPUT: (),
    Level.DEPENDENCY_VECTORS: (
        "recovery_feedback.suggestions[].tables",
        "recovery_feedback.suggestions[].rules",
    ),
    Level.SUBGRAPH: ("GET /contract/graph",),
    Level.RULES_FINGERPRINT: ("rules_version",),
}
