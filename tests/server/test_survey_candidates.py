"""Property: a survey's candidates are, for any registry table, database rows and chunking, the
brute-force set of keys whose row differs or that only the registry holds (capture/survey.py)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from invalidation_contracts.server.capture.survey import TableSurvey
from invalidation_contracts.server.tables import Snapshot

KEYS = [f"k{i}" for i in range(8)]
values = st.one_of(st.integers(0, 2), st.just(float("nan")))  # NaN: a row it cannot carry
tables = st.dictionaries(st.sampled_from(KEYS), st.integers(0, 2))
database = st.dictionaries(st.sampled_from(KEYS), values)


def brute_force(registry: dict[str, int], rows: dict[str, Any]) -> set[str]:
    readable = {k: v for k, v in rows.items() if v == v}  # NaN is not equal to itself
    differing = {k for k, v in readable.items() if registry.get(k) != v or k not in registry}
    return differing | (registry.keys() - rows.keys())


@given(tables, database, st.integers(1, 4), st.booleans())
def test_candidates_are_the_differing_rows_and_the_registrys_own_keys(
    registry: dict[str, int], rows: dict[str, Any], chunk: int, repeat: bool
) -> None:
    current = Snapshot.build("t", "1", {k: {"a": v} for k, v in registry.items()})
    survey = TableSurvey(current)
    fed = [(k, {"a": v}) for k, v in rows.items()]
    if repeat:  # a chunk read twice (a retried read) changes nothing
        fed += fed[:chunk]
    for start in range(0, len(fed), chunk):
        survey.feed(fed[start : start + chunk])
    assert survey.candidates() == brute_force(registry, rows)
    assert survey.equal == (not survey.candidates() and all(v == v for v in rows.values()))
