"""The wire-cost study's trims: what each omits, and that a lossy trim is caught."""

from __future__ import annotations

from benchmarks.wire_cost import REPLAYABLE, Exchange, Trimmer, Truth, reconstructible

from invalidation_contracts.protocol.levels import Level

FULL = {
    "table_versions": {"a": "1.0.0", "b": "1.0.0"},
    "rules_version": "r1",
    "contract_seq": 3,
    "contract_epoch": "ep",
    "success": True,
}
TRUTH = Truth({"a": "1.0.0", "b": "1.0.0"}, "r1", 3, "ep")


def _stream(trimmer: Trimmer, bodies: list[tuple[int | None, dict, Truth]]) -> list[Exchange]:
    return [
        Exchange("/v1/x", since, body, trimmer(body, since, False), truth)
        for since, body, truth in bodies
    ]


def test_a_full_response_is_sent_whole() -> None:
    assert Trimmer(REPLAYABLE)(FULL, None, False) == FULL


def test_an_unchanged_conditional_response_carries_no_envelope_once_the_epoch_is_known() -> None:
    trim = Trimmer(REPLAYABLE)
    trim(FULL, None, False)
    conditional = {**FULL, "table_versions": {}}
    assert trim(conditional, 3, False) == {"success": True}


def test_a_moved_table_rules_stamp_or_position_is_still_sent() -> None:
    trim = Trimmer(REPLAYABLE)
    trim(FULL, None, False)
    moved = {**FULL, "table_versions": {"b": "1.1.0"}, "rules_version": "r2", "contract_seq": 5}
    assert trim(moved, 3, True) == {
        "table_versions": {"b": "1.1.0"},
        "rules_version": "r2",
        "contract_seq": 5,
        "success": True,
    }


def test_a_client_rebuilds_every_full_contract_from_the_trimmed_stream() -> None:
    moved = Truth({"a": "1.0.0", "b": "1.1.0"}, "r1", 4, "ep")
    stream = _stream(
        Trimmer(REPLAYABLE),
        [
            (None, FULL, TRUTH),
            (3, {**FULL, "table_versions": {}}, TRUTH),
            (3, {**FULL, "table_versions": {"b": "1.1.0"}, "contract_seq": 4}, moved),
        ],
    )
    assert reconstructible(stream, Level.RULES_FINGERPRINT) == []


def test_a_trim_that_loses_a_moved_table_is_reported() -> None:
    class Lossy(Trimmer):
        def __call__(self, body, since, rules_moved):
            out = super().__call__(body, since, rules_moved)
            out.pop("table_versions", None)
            return out

    moved = Truth({"a": "1.0.0", "b": "1.1.0"}, "r1", 4, "ep")
    stream = _stream(
        Lossy(REPLAYABLE),
        [(None, FULL, TRUTH), (3, {**FULL, "table_versions": {"b": "1.1.0"}}, moved)],
    )
    assert reconstructible(stream, Level.RULES_FINGERPRINT)
