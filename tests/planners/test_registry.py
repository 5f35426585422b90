"""Planner specs: parsing, building, and the errors a bad spec or a missing key gives."""

from __future__ import annotations

import pytest

from invalidation_contracts.planners import (
    Planner,
    PlannerConfigError,
    SimulatedPlanner,
    create_planner,
    parse_planner_spec,
)
from invalidation_contracts.planners.anthropic import AnthropicPlanner
from invalidation_contracts.planners.openai import OpenAIPlanner
from invalidation_contracts.planners.registry import token_source


@pytest.mark.parametrize(
    ("spec", "kind", "model", "url"),
    [
        ("simulated:exact", "simulated", "exact", None),
        ("anthropic:claude-haiku-4-5", "anthropic", "claude-haiku-4-5", None),
        ("openai:gpt-5-mini", "openai", "gpt-5-mini", None),
        (
            "openai-compatible:llama3.1:8b@http://localhost:11434/v1",
            "openai-compatible",
            "llama3.1:8b",
            "http://localhost:11434/v1",
        ),
        (
            "openai-compatible:org/model-7b@https://gw.example/v1",
            "openai-compatible",
            "org/model-7b",
            "https://gw.example/v1",
        ),
    ],
)
def test_specs_parse_into_kind_model_and_url(spec, kind, model, url):
    parsed = parse_planner_spec(spec)
    assert (parsed.kind, parsed.model, parsed.base_url) == (kind, model, url)


def test_simulated_spec_has_no_requested_model():
    assert parse_planner_spec("simulated:exact").requested_model is None
    assert parse_planner_spec("openai:gpt-5-mini").requested_model == "gpt-5-mini"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("exact", "KIND:MODEL"),
        ("gemini:flash", "KIND:MODEL"),
        ("anthropic:", "nothing after"),
        ("simulated:reckless", "unknown simulated profile"),
        ("openai-compatible:llama3", "MODEL@http"),
        ("openai-compatible:llama3@localhost:8000", "MODEL@http"),
        ("openai:gpt 5", "whitespace"),
        ("simulated:exact?memory_add_field_rate", "bad parameters"),
    ],
)
def test_bad_specs_are_config_errors(spec, message):
    with pytest.raises(PlannerConfigError, match=message):
        create_planner(spec)


def test_every_profile_is_built_and_named_for_its_spec():
    for profile in ("exact", "conservative", "opt-out", "paraphrase"):
        planner = create_planner(f"simulated:{profile}")
        assert isinstance(planner, SimulatedPlanner) and isinstance(planner, Planner)
        assert planner.name == f"simulated:{profile}"
        assert planner.profile.name == profile


def test_spec_parameters_override_the_preset():
    planner = create_planner(
        "simulated:conservative?memory_add_field_rate=0.2&comply_after=2&use_memory=false"
    )
    assert planner.profile.memory_add_field_rate == 0.2
    assert planner.profile.comply_after == 2
    assert planner.profile.use_memory is False
    assert planner.profile.memory_rewrite_rate == 1.0


def test_options_override_the_preset_and_the_spec():
    planner = create_planner("simulated:exact?paraphrase_rate=0.3", {"paraphrase_rate": 0.9})
    assert planner.profile.paraphrase_rate == 0.9


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("simulated:exact?temperature=0.2", "unknown simulated-planner parameter 'temperature'"),
        ("simulated:exact?memory_add_field_rate=high", "not a valid float"),
        ("simulated:exact?memory_add_field_rate=2", r"in \[0, 1\]"),
        ("simulated:exact?comply_after=1.5", "not a valid int"),
        ("simulated:exact?use_memory=perhaps", "not a valid bool"),
    ],
)
def test_bad_simulated_parameters_are_config_errors(spec, message):
    with pytest.raises(PlannerConfigError, match=message):
        create_planner(spec)


def test_unknown_option_for_a_vendor_planner_is_a_config_error(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with pytest.raises(PlannerConfigError, match="unknown option"):
        create_planner("openai:gpt-5-mini", {"top_k": 3})


def test_vendor_planners_are_built_from_their_specs(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-oa")
    anthropic_planner = create_planner("anthropic:claude-haiku-4-5")
    openai_planner = create_planner("openai:gpt-5-mini")
    compatible = create_planner("openai-compatible:qwen@http://127.0.0.1:8000/v1")
    assert isinstance(anthropic_planner, AnthropicPlanner) and isinstance(
        anthropic_planner, Planner
    )
    assert isinstance(openai_planner, OpenAIPlanner) and not openai_planner.compatible
    assert compatible.compatible and compatible.requested_model == "qwen"
    assert [p.simulated for p in (anthropic_planner, openai_planner, compatible)] == [False] * 3
    assert compatible.name == "openai-compatible:qwen@http://127.0.0.1:8000/v1"


@pytest.mark.parametrize(
    ("spec", "variable"),
    [("anthropic:claude-haiku-4-5", "ANTHROPIC_API_KEY"), ("openai:gpt-5-mini", "OPENAI_API_KEY")],
)
def test_missing_key_names_the_environment_variable(monkeypatch, spec, variable):
    monkeypatch.delenv(variable, raising=False)
    with pytest.raises(PlannerConfigError, match=variable):
        create_planner(spec)


def test_explicit_api_key_needs_no_environment(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert (
        create_planner("anthropic:claude-haiku-4-5", {"api_key": "sk-given"}).requested_model
        == "claude-haiku-4-5"
    )


@pytest.mark.parametrize(
    ("spec", "source"),
    [
        ("simulated:exact", "estimated"),
        ("anthropic:claude-haiku-4-5", "billed"),
        ("openai:gpt-5-mini", "billed"),
        ("openai-compatible:qwen@http://127.0.0.1:8089/v1", "reported by server"),
        ("local:qwen2.5-coder-0.5b", "reported by server"),
    ],
)
def test_token_counts_are_labelled_by_who_counted_them(spec, source):
    assert token_source(spec) == source
