"""Planner options: KEY=VALUE pairs, typed per option, accepted per planner kind."""

from __future__ import annotations

import pytest

from invalidation_contracts.planners import PlannerConfigError, check_planner, create_planner
from invalidation_contracts.planners.options import (
    accepted_options,
    coerce_options,
    options_for,
    parse_option_pairs,
)


def test_pairs_parse_into_a_mapping():
    assert parse_option_pairs(["timeout=600", " max_retries = 2 ", "api_key=a=b"]) == {
        "timeout": "600",
        "max_retries": "2",
        "api_key": "a=b",
    }


@pytest.mark.parametrize("pair", ["timeout", "=600", ""])
def test_a_pair_without_key_or_equals_is_a_config_error(pair):
    with pytest.raises(PlannerConfigError, match="not KEY=VALUE"):
        parse_option_pairs([pair])


def test_strings_are_typed_for_their_option():
    typed = coerce_options(
        "local",
        {"timeout": "600", "max_retries": "2", "temperature": "0.5", "prompt_cache": "yes"},
    )
    assert typed == {"timeout": 600.0, "max_retries": 2, "temperature": 0.5, "prompt_cache": True}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": "soon"}, "not a valid float"),
        ({"max_retries": "1.5"}, "not a valid int"),
        ({"max_retries": 1.5}, "not a valid int"),
        ({"max_retries": "-1"}, ">= 0"),
        ({"temperature": "3"}, "<= 2"),
        ({"port": "70000"}, "<= 65535"),
        ({"prompt_cache": "maybe"}, "not a valid bool"),
        ({"top_k": "3"}, "unknown option"),
    ],
)
def test_bad_values_and_unknown_options_are_config_errors(options, message):
    with pytest.raises(PlannerConfigError, match=message):
        coerce_options("local", options)


def test_each_kind_accepts_its_own_options():
    assert {"parallel", "context", "threads", "port"} <= accepted_options("local")
    assert "parallel" not in accepted_options("openai-compatible")
    assert "base_url" in accepted_options("openai") and "base_url" not in accepted_options("local")
    assert "paraphrase_rate" in accepted_options("simulated")
    assert "timeout" not in accepted_options("simulated")


def test_a_command_wide_option_reaches_only_the_kinds_that_take_it():
    given = {"timeout": "600", "paraphrase_rate": "0.5"}
    assert options_for("local", given) == {"timeout": "600"}
    assert options_for("simulated", given) == {"paraphrase_rate": "0.5"}


def test_spec_options_never_reach_the_url():
    planner = create_planner(
        "openai-compatible:qwen@http://127.0.0.1:8089/v1?timeout=600&max_retries=0"
    )
    assert str(planner._client.base_url) == "http://127.0.0.1:8089/v1/"
    assert planner.timeout == 600.0
    assert planner._client.max_retries == 0


def test_given_options_override_the_spec_options():
    planner = create_planner(
        "openai-compatible:qwen@http://127.0.0.1:8089/v1?timeout=600", {"timeout": "30"}
    )
    assert planner.timeout == 30.0


def test_a_compatible_server_waits_five_minutes_by_default():
    assert create_planner("openai-compatible:qwen@http://127.0.0.1:8089/v1").timeout >= 300


def test_check_planner_validates_without_building_anything():
    assert check_planner("local:qwen2.5-coder-0.5b", {"parallel": "3"}).kind == "local"
    with pytest.raises(PlannerConfigError, match="unknown local model"):
        check_planner("local:llama-70b")
    with pytest.raises(PlannerConfigError, match="unknown option"):
        check_planner("anthropic:claude-haiku-4-5?parallel=2")
