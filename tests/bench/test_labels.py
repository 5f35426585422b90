"""Every drift event's label is checked against the oracle before a run (issue 23, item 5):
labelling a breaking event benign (or the reverse) is a scenario error naming the event."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.tau2 import scenario_params

from invalidation_contracts.bench.labels import check_labels
from invalidation_contracts.bench.scenario import (
    ScenarioError,
    ScenarioMismatch,
    load_scenario,
    parse_scenario,
    scenarios_dir,
    shipped_scenarios,
)
from invalidation_contracts.bench.verify import check_scenario, verify_domain

REWRITE = Path(__file__).parents[2] / "benchmarks" / "scenarios" / "payments-rewrite-drifted.toml"


def relabelled(name: str, old: str, new: str, count: int = 1) -> str:
    text = (scenarios_dir() / f"{name}.toml").read_text(encoding="utf-8")
    assert old in text
    return text.replace(old, new, count)


@pytest.mark.parametrize("name", scenario_params([*shipped_scenarios(), str(REWRITE)]))
def test_every_shipped_stream_is_labelled_as_the_oracle_finds_it(name):
    scenario = load_scenario(name)
    assert check_labels(scenario, verify_domain(scenario)) == []


def test_a_breaking_event_labelled_benign_is_a_scenario_error_naming_it():
    scenario = parse_scenario(
        relabelled("payments-drifted", 'kind = "breaking"', 'kind = "benign"').replace(
            "stale_slots = [12]", "stale_slots = []"
        )
    )
    catalog = verify_domain(load_scenario("payments-drifted"))
    with pytest.raises(ScenarioMismatch) as caught:
        check_scenario(scenario, catalog)
    message = str(caught.value)
    assert "the drift after episode 11 (table active_csm_codes) is labelled 'benign'" in message
    assert "the oracle finds it 'breaking'" in message
    assert "ADD_REQUIRED_PROMO_CODE" in message


def test_a_benign_event_labelled_breaking_is_a_scenario_error():
    scenario = parse_scenario(
        relabelled("payments-drifted", 'kind = "benign"', 'kind = "breaking"').replace(
            "stale_slots = [12]", "stale_slots = [12, 25]"
        )
    )
    catalog = verify_domain(load_scenario("payments-drifted"))
    with pytest.raises(
        ScenarioMismatch, match="labelled 'breaking', but the oracle finds it 'benign'"
    ):
        check_scenario(scenario, catalog)


SPLIT = """
[[drift]]
after_episode = 11
table = "token_funding_map"
snapshot = "token_funding_map.visa-credit-reissued"
kind = "{first}"

[[drift]]
after_episode = 11
table = "recommended_credit_token"
snapshot = "recommended_credit_token.visa-platinum"
kind = "breaking"
"""


def split(first: str) -> str:
    """The rewrite stream with its one change set written as two single-table events."""
    text = REWRITE.read_text(encoding="utf-8")
    return text[: text.index("# One configuration change")] + SPLIT.format(first=first)


def test_a_multi_table_event_is_judged_as_one_change_set():
    scenario = load_scenario(str(REWRITE))
    [event] = scenario.drift
    assert event.target == "tables token_funding_map + recommended_credit_token"
    assert check_labels(scenario, verify_domain(scenario)) == []


def test_one_configuration_split_into_events_is_judged_event_by_event():
    catalog = verify_domain(load_scenario(str(REWRITE)))
    check_scenario(parse_scenario(split("benign")), catalog)
    with pytest.raises(ScenarioMismatch, match="token_funding_map\\) is labelled 'breaking'"):
        check_scenario(parse_scenario(split("breaking")), catalog)


def test_a_multi_table_event_names_each_table_once():
    text = REWRITE.read_text(encoding="utf-8").replace(
        'table = "recommended_credit_token"', 'table = "token_funding_map"'
    )
    with pytest.raises(ScenarioError, match="names each of its tables once"):
        parse_scenario(text)
